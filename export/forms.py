"""The dashboard's form to cut a release."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from annotation.models import Campaign
from export.licences import DEFAULT_JUDGMENT_LICENSE, JudgmentLicense
from export.services import DEFAULT_SEED, release_validate_ratios
from export.splitting import DEFAULT_RATIOS


class ReleaseForm(forms.Form):
    campaigns = forms.ModelMultipleChoiceField(
        queryset=Campaign.objects.order_by("slug"),
        to_field_name="slug",
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text="The finalised candidates of these campaigns go into the release.",
    )
    seed = forms.IntegerField(initial=DEFAULT_SEED, min_value=-(2**63), max_value=2**63 - 1)
    ratios = forms.CharField(
        initial=",".join(str(ratio) for ratio in DEFAULT_RATIOS),
        max_length=50,
        help_text="train,validation or train,validation,test — e.g. 0.8,0.1,0.1 or 0.8,0.2 (no test split)",
    )
    name = forms.CharField(max_length=200, required=False, help_text="Optional; a name is derived.")
    include_raw_judgments = forms.BooleanField(
        required=False, help_text="Add each kept judgment with a pseudonymous worker id."
    )
    judgments_license = forms.ChoiceField(
        choices=JudgmentLicense.choices,
        required=False,
        initial=DEFAULT_JUDGMENT_LICENSE,
        label="Licence of the collected judgments",
        help_text="Covers the judgments your campaigns collected and the compilation; imported "
        "sources (VATEX: CC BY 4.0, VATEX-EVAL: MIT) keep their own, and the card lists each.",
    )

    def clean_ratios(self) -> list[float]:
        raw = self.cleaned_data["ratios"]
        try:
            values = [float(part) for part in raw.split(",")]
        except ValueError:
            raise ValidationError("ratios must be numbers separated by commas")
        return release_validate_ratios(values)

    def service_arguments(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "campaigns": list(data["campaigns"]),
            "seed": data["seed"],
            "ratios": data["ratios"],
            "name": data["name"] or None,
            "include_raw_judgments": data["include_raw_judgments"],
            "judgments_license": data["judgments_license"] or DEFAULT_JUDGMENT_LICENSE,
        }
