"""`manage.py agreement SLUG [--json]`: Krippendorff's alpha (ordinal, 1–5) per question."""

from __future__ import annotations

from typing import Any

from annotation.management.campaign_command import CampaignCommand
from annotation.quality.agreement import campaign_agreement
from common.management.arguments import figure
from common.management.declared import flag


class Command(CampaignCommand):
    """Krippendorff's alpha (ordinal, values 1-5) per question of a campaign, over every judgment
    (alpha_all, before QC) and over kept judgments (alpha_kept, after QC). Prints
    {"questions": {"<key>": {"alpha_all", "alpha_kept", "items"}}} with --json."""

    arguments = (
        flag(
            "--snapshot",
            help="Also store the figures in the agreement history (dashboard chart).",
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = self.campaign(options)
        figures = campaign_agreement(campaign=campaign, snapshot=options["snapshot"])
        payload = {
            "questions": {
                key: {
                    "alpha_all": values["alpha_all"],
                    "alpha_kept": values["alpha_kept"],
                    "items": values["items"],
                }
                for key, values in figures.items()
            }
        }
        lines = [
            f"{key}: alpha all {figure(values['alpha_all'], 4)}, kept "
            f"{figure(values['alpha_kept'], 4)} over {values['items']} candidates"
            for key, values in figures.items()
        ]
        self.emit(payload, "\n".join(lines))
