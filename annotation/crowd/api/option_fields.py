"""The API's input fields for the campaign settings, derived from their rules with the forms'
(`annotation.crowd.campaign_option_fields.option_rule`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from annotation.crowd.campaign_option_fields import option_rule
from annotation.crowd.campaign_options import OPTIONS_BY_NAME, Kind


class QuestionInputSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField(required=False)  # type: ignore[assignment]
    help = serializers.CharField(required=False, allow_blank=True)
    levels = serializers.ListField(child=serializers.DictField(), required=False)


_SERIALIZER_FIELDS: dict[Kind, type[serializers.Field]] = {
    Kind.TEXT: serializers.CharField,
    Kind.CODE: serializers.CharField,
    Kind.URL: serializers.URLField,
    Kind.INTEGER: serializers.IntegerField,
    Kind.NUMBER: serializers.FloatField,
    Kind.DECIMAL: serializers.DecimalField,
    Kind.CHOICE: serializers.ChoiceField,
    Kind.BOOLEAN: serializers.BooleanField,
    Kind.JSON: serializers.JSONField,
    Kind.ALLOCATION: serializers.JSONField,
}


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
    if option.kind == Kind.QUESTIONS:
        return QuestionInputSerializer(many=True, **common)
    if option.kind in (Kind.TEXT, Kind.CODE, Kind.URL):
        common["allow_blank"] = option.blank
    if option.kind in (Kind.INTEGER, Kind.NUMBER):
        common["allow_null"] = option.nullable
    return _SERIALIZER_FIELDS[option.kind](**option_rule(option), **common)
