"""The API's and the forms' fields for the campaign settings, derived from their rules
(`annotation.crowd.campaign_options`): a bound, a choice or a default is never written here.

Each surface declares its fields one by one (`lease_seconds = option_form_field("lease_seconds")`)
so that the field order, and with it the page and the OpenAPI schema, stays the table's; what a
surface adds is presentation alone (a widget, a required name at creation). The API's half is
`annotation.crowd.api.option_fields`: the admin loads this module at `django.setup()`, and DRF's
serializers would otherwise load with it into every process (a release build, a QC run).
"""

from __future__ import annotations

from typing import Any

from django import forms

from annotation.crowd.campaign_options import OPTIONS_BY_NAME, CampaignOption, Kind


def option_rule(option: CampaignOption) -> dict[str, Any]:
    """The option's rule in the keywords DRF's and Django's fields share: bounds, lengths, digits,
    choices. (A DECIMAL's maximum is in its digits: 8 digits, 2 places is below 1,000,000.)"""
    if option.kind == Kind.CHOICE:
        return {"choices": list(option.choices)}
    if option.kind == Kind.DECIMAL:
        return {
            "min_value": option.minimum,
            "max_digits": option.max_digits,
            "decimal_places": option.decimal_places,
        }
    rule = {"min_value": option.minimum, "max_value": option.maximum}
    rule["max_length"] = option.max_length
    # A text that may be empty has no minimum length (its pattern applies once it is given).
    if option.min_length is not None and not option.blank and option.min_length > 1:
        rule["min_length"] = option.min_length
    return {key: value for key, value in rule.items() if value is not None}


_FORM_FIELDS: dict[Kind, type[forms.Field]] = {
    Kind.SLUG: forms.SlugField,
    Kind.TEXT: forms.CharField,
    Kind.CODE: forms.CharField,
    Kind.URL: forms.URLField,
    Kind.INTEGER: forms.IntegerField,
    Kind.NUMBER: forms.FloatField,
    Kind.DECIMAL: forms.DecimalField,
    Kind.CHOICE: forms.ChoiceField,
    Kind.BOOLEAN: forms.BooleanField,
}


def option_form_field(name: str, **presentation: Any) -> forms.Field:
    """The dashboard form's field for a setting; `presentation` adds a widget or the like."""
    option = OPTIONS_BY_NAME[name]
    if option.kind not in _FORM_FIELDS:
        raise ValueError(f"The dashboard form has no field for {name!r} ({option.kind}).")
    # An unticked box is absent from a post: a BOOLEAN is never required.
    optional = option.nullable or option.blank or option.kept_when_absent
    common: dict[str, Any] = {
        "required": not optional and option.kind != Kind.BOOLEAN,
        **({"help_text": option.page_help} if option.page_help else {}),
        **({"label": option.label} if option.label else {}),
        **({"initial": option.default} if option.default is not None else {}),
        **({"assume_scheme": "https"} if option.kind == Kind.URL else {}),
        **presentation,
    }
    return _FORM_FIELDS[option.kind](**option_rule(option), **common)
