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
from django.utils.html import format_html, format_html_join

from annotation.allocation import AdaptivePolicy
from annotation.crowd.campaign_options import (
    JUDGMENTS_MAX,
    OPTIONS_BY_NAME,
    CampaignOption,
    Kind,
)

# The adaptive policy's settings as the page shows them: (key, label), after the policy's choice.
_ALLOCATION_SETTINGS = (
    ("minimum", "Minimum judgments"),
    ("maximum", "Maximum judgments"),
    ("disagreement_range", "Disagreement range"),
    ("standard_error_threshold", "Standard-error threshold"),
    ("metric_disagreement_threshold", "Metric disagreement threshold"),
)
_ALLOCATION_KINDS = (("fixed", "Fixed: judgments per candidate, each"), ("adaptive", "Adaptive"))


class AllocationWidget(forms.MultiWidget):
    """The policy's choice and the adaptive settings, each with its own label."""

    def __init__(self) -> None:
        number = {"step": "any", "min": "0"}
        super().__init__(
            widgets=[
                forms.Select(choices=_ALLOCATION_KINDS),
                forms.NumberInput(attrs={"min": "1", "max": str(JUDGMENTS_MAX)}),
                forms.NumberInput(attrs={"min": "1", "max": str(JUDGMENTS_MAX)}),
                forms.NumberInput(attrs={"min": "1"}),
                forms.NumberInput(attrs=number),
                forms.NumberInput(attrs=number),
            ]
        )

    def decompress(self, value: Any) -> list[Any]:
        if not isinstance(value, dict) or not value:
            # Fixed; the boxes show the adaptive policy's defaults, ready for a switch.
            defaults = AdaptivePolicy().as_dict()
            return ["fixed"] + [defaults[key] for key, _label in _ALLOCATION_SETTINGS]
        return [value.get("kind")] + [value.get(key) for key, _label in _ALLOCATION_SETTINGS]

    def render(self, name: str, value: Any, attrs: Any = None, renderer: Any = None) -> Any:
        values = value if isinstance(value, list | tuple) else self.decompress(value)
        base_id = (attrs or {}).get("id") or f"id_{name}"
        labels = ["Policy", *(label for _key, label in _ALLOCATION_SETTINGS)]
        parts = []
        for index, (widget, label) in enumerate(zip(self.widgets, labels, strict=True)):
            widget_id = f"{base_id}_{index}"
            shown = values[index] if index < len(values) else None
            parts.append(
                (
                    widget_id,
                    label,
                    widget.render(f"{name}_{index}", shown, {"id": widget_id}, renderer),
                )
            )
        return format_html(
            '<div class="allocation">{}</div>',
            format_html_join("", '<label for="{}">{}</label> {}<br>', parts),
        )


class AllocationField(forms.MultiValueField):
    """The allocation setting from the page: the policy's choice and its settings. Nothing
    posted: None (the campaign keeps its own); fixed: `{}`; adaptive: the policy's settings
    (empty boxes take the policy's defaults, or turn an optional rule off: a threshold left
    empty is no rule). The rules are the service's (`campaign_options`)."""

    widget = AllocationWidget

    def __init__(self, **kwargs: Any) -> None:
        fields = (
            forms.ChoiceField(choices=_ALLOCATION_KINDS, required=False),
            forms.IntegerField(min_value=1, max_value=JUDGMENTS_MAX, required=False),
            forms.IntegerField(min_value=1, max_value=JUDGMENTS_MAX, required=False),
            forms.IntegerField(min_value=1, required=False),
            forms.FloatField(required=False),
            forms.FloatField(required=False),
        )
        super().__init__(fields=fields, require_all_fields=False, **kwargs)

    def compress(self, data_list: list[Any]) -> dict[str, Any] | None:
        if not data_list or not data_list[0]:
            return None
        if data_list[0] == "fixed":
            return {}
        settings = dict(
            zip((key for key, _label in _ALLOCATION_SETTINGS), data_list[1:], strict=False)
        )
        # An empty minimum or maximum takes the policy's default; an empty threshold is no rule.
        policy: dict[str, Any] = {"kind": "adaptive"}
        for key, value in settings.items():
            if value is not None or key not in ("minimum", "maximum"):
                policy[key] = value
        problem = OPTIONS_BY_NAME["allocation"].check(policy)[1]
        if problem:
            raise forms.ValidationError(problem)
        return policy


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
    Kind.ALLOCATION: AllocationField,
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
