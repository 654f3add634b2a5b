"""The training page's form to start a run: only the devices the machine has, the tiny backbone by
default on a CPU-only machine, and a confirmation (saying what it needs) before a large one."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from common.models import JobStatus
from training_bridge.models import TrainingAblation
from training_bridge.services.machine import (
    BackboneNeeds,
    backbone_needs,
    training_default_backbone,
    training_default_device,
    training_devices,
)

OTHER_BACKBONE = "other"
DEVICE_LABELS = {"cpu": "CPU", "cuda": "GPU (CUDA)"}


def backbone_choices() -> list[tuple[str, str]]:
    configured = str(settings.LEPUS_DEFAULT_BACKBONE or "").strip()
    choices = [("tiny", "tiny: small random model, minutes on a CPU (tests, demos)")]
    if configured and configured != "tiny":
        choices.append((configured, f"{configured}: the real model (large)"))
    choices.append((OTHER_BACKBONE, "another model: a folder of weights or a Hub name below"))
    return choices


class TrainingRunForm(forms.Form):
    release = forms.TypedChoiceField(coerce=int, label="Release")
    backbone = forms.ChoiceField(required=False, label="Backbone")
    backbone_path = forms.CharField(
        required=False,
        max_length=500,
        label="Other model",
        help_text="A folder holding the weights on the training worker, or a Hub name in its "
        "cache (nothing is downloaded).",
    )
    device = forms.ChoiceField(required=False, label="Device")
    ablation = forms.ChoiceField(
        choices=TrainingAblation.choices, required=False, label="Method", initial="full"
    )
    reference_free = forms.BooleanField(required=False, label="reference-free")
    name = forms.CharField(required=False, max_length=200, label="Name")
    confirm_large = forms.BooleanField(
        required=False,
        label="The training worker has these weights and this memory: start anyway",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from export.models import Release

        super().__init__(*args, **kwargs)
        self.needs: BackboneNeeds | None = None
        releases = Release.objects.filter(status=JobStatus.SUCCEEDED).order_by("-created_at", "-id")
        self.releases = list(releases[:50])
        self.fields["release"].choices = [  # type: ignore[attr-defined]
            (release.pk, f"{release.pk} · {release.name}") for release in self.releases
        ]
        self.devices = training_devices()
        self.fields["device"].choices = [  # type: ignore[attr-defined]
            (device, DEVICE_LABELS.get(device, device)) for device in self.devices
        ]
        self.fields["device"].initial = training_default_device()
        self.fields["backbone"].choices = backbone_choices()  # type: ignore[attr-defined]
        self.fields["backbone"].initial = training_default_backbone()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        choice = data.get("backbone") or training_default_backbone()
        backbone = (data.get("backbone_path") or "").strip() if choice == OTHER_BACKBONE else choice
        if not backbone:
            self.add_error("backbone_path", "Give the folder or Hub name of the other model.")
            return data
        data["backbone_name"] = backbone
        data["device"] = data.get("device") or training_default_device()
        data["ablation"] = data.get("ablation") or TrainingAblation.FULL
        self.needs = backbone_needs(backbone)
        if self.needs.is_large and not data.get("confirm_large"):
            self.add_error(
                "confirm_large",
                f"{self.needs.summary} Confirm to start a run with it"
                + (" on a CPU." if data["device"] == "cpu" else "."),
            )
        return data

    def service_arguments(self) -> dict[str, Any]:
        data = self.cleaned_data
        release = next(release for release in self.releases if release.pk == data["release"])
        return {
            "release": release,
            "backbone": data["backbone_name"],
            "device": data["device"],
            "ablation": data["ablation"],
            "reference_free": data["reference_free"],
            "name": data["name"],
        }
