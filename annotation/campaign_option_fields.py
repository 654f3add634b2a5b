"""The API's and the forms' fields for the campaign settings, derived from their rules
(`annotation.campaign_options`): a bound, a choice or a default is never written here.

Each surface declares its fields one by one (`lease_seconds = option_form_field("lease_seconds")`)
so that the field order, and with it the page and the OpenAPI schema, stays the table's; what a
surface adds is presentation alone (a widget, a required name at creation).
"""

from __future__ import annotations

from typing import Any

from django import forms
from rest_framework import serializers

from annotation.campaign_options import OPTIONS_BY_NAME, CampaignOption, Kind


class QuestionInputSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField(required=False)  # type: ignore[assignment]
    help = serializers.CharField(required=False, allow_blank=True)
    levels = serializers.ListField(child=serializers.DictField(), required=False)


def _bounds(option: CampaignOption) -> dict[str, Any]:
    return {
        key: value
        for key, value in (("min_value", option.minimum), ("max_value", option.maximum))
        if value is not None
    }


def _lengths(option: CampaignOption) -> dict[str, Any]:
    lengths = {"max_length": option.max_length}
    # A text that may be empty has no minimum length (its pattern applies once it is given).
    if option.min_length is not None and not option.blank and option.min_length > 1:
        lengths["min_length"] = option.min_length
    return {key: value for key, value in lengths.items() if value is not None}


def option_serializer_field(name: str, *, required: bool = False) -> serializers.Field:
    """The API's input field for a setting (`required` at creation for the slug and the name)."""
    option = OPTIONS_BY_NAME[name]
    common: dict[str, Any] = {"required": required}
    if option.help:
        common["help_text"] = option.help
    if option.kind == Kind.SLUG:
        return serializers.RegexField(
            option.pattern,
            max_length=option.max_length,
            error_messages={"invalid": option.error},
            **common,
        )
    if option.kind in (Kind.TEXT, Kind.CODE):
        return serializers.CharField(allow_blank=option.blank, **_lengths(option), **common)
    if option.kind == Kind.URL:
        return serializers.URLField(allow_blank=option.blank, **_lengths(option), **common)
    if option.kind == Kind.INTEGER:
        return serializers.IntegerField(allow_null=option.nullable, **_bounds(option), **common)
    if option.kind == Kind.NUMBER:
        return serializers.FloatField(allow_null=option.nullable, **_bounds(option), **common)
    if option.kind == Kind.DECIMAL:
        # The maximum is in the digits (8 digits, 2 places: below 1,000,000).
        return serializers.DecimalField(
            max_digits=option.max_digits,
            decimal_places=option.decimal_places,
            min_value=option.minimum,
            **common,
        )
    if option.kind == Kind.CHOICE:
        return serializers.ChoiceField(choices=list(option.choices), **common)
    if option.kind == Kind.BOOLEAN:
        return serializers.BooleanField(**common)
    if option.kind == Kind.QUESTIONS:
        return QuestionInputSerializer(many=True, **common)
    return serializers.JSONField(**common)


def option_form_field(name: str, **presentation: Any) -> forms.Field:
    """The dashboard form's field for a setting; `presentation` adds a widget or the like."""
    option = OPTIONS_BY_NAME[name]
    common: dict[str, Any] = {
        "required": not (option.nullable or option.blank or option.kept_when_absent),
        **({"help_text": option.page_help} if option.page_help else {}),
        **({"label": option.label} if option.label else {}),
        **({"initial": option.default} if option.default is not None else {}),
        **presentation,
    }
    if option.kind == Kind.SLUG:
        return forms.SlugField(max_length=option.max_length, **common)
    if option.kind in (Kind.TEXT, Kind.CODE):
        return forms.CharField(**_lengths(option), **common)
    if option.kind == Kind.URL:
        return forms.URLField(assume_scheme="https", **_lengths(option), **common)
    if option.kind == Kind.INTEGER:
        return forms.IntegerField(**_bounds(option), **common)
    if option.kind == Kind.NUMBER:
        return forms.FloatField(**_bounds(option), **common)
    if option.kind == Kind.DECIMAL:
        return forms.DecimalField(
            min_value=option.minimum,
            max_digits=option.max_digits,
            decimal_places=option.decimal_places,
            **common,
        )
    if option.kind == Kind.CHOICE:
        return forms.ChoiceField(choices=list(option.choices), **common)
    if option.kind == Kind.BOOLEAN:
        return forms.BooleanField(**{**common, "required": False})
    raise ValueError(f"The dashboard form has no field for {name!r} ({option.kind}).")
