"""Create a crowd campaign over the matching candidates (all model outputs by default).

    python manage.py create_campaign --slug SLUG [--judgments-per-candidate K] [--clips N]
        [--system NAME] [--reference-free] [--json]

prints {"slug": ..., "candidates": n, "clips": n} with --json. Clips whose video is not ready yet
are included; the engine serves them once they are (`--clips N` takes ready clips first).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.management.base import CommandError, CommandParser

from annotation.crowd.campaign_options import OPTIONS_BY_NAME
from annotation.crowd.services.campaigns import CampaignInvalid, campaign_counts, campaign_create
from common.management.base import LepusCommand


class Command(LepusCommand):
    help = "Create a crowd campaign over the matching candidates (all by default)."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--slug", required=True, help="Campaign slug (worker link /w/SLUG/).")
        parser.add_argument("--name", default="", help="Display name (default: the slug).")
        parser.add_argument("--judgments-per-candidate", type=int, default=3, metavar="K")
        parser.add_argument(
            "--clips", type=int, default=None, metavar="N", help="At most N clips (ready first)."
        )
        parser.add_argument(
            "--system",
            action="append",
            default=[],
            metavar="NAME",
            help="Only candidates of this captioning system (repeatable).",
        )
        parser.add_argument(
            "--import-batch",
            action="append",
            type=int,
            default=[],
            metavar="ID",
            help="Only candidates of this import batch (repeatable).",
        )
        parser.add_argument(
            "--clip-id",
            action="append",
            default=[],
            metavar="VATEX_ID",
            help="Only this clip (repeatable).",
        )
        parser.add_argument("--reference-free", action="store_true")
        parser.add_argument("--lease-seconds", type=int, default=None)
        parser.add_argument("--min-seconds-on-clip", type=int, default=None)
        parser.add_argument("--reason-at-or-below", type=int, default=None)
        parser.add_argument("--max-assignments-per-worker", type=int, default=None)
        parser.add_argument("--pay-per-assignment", type=Decimal, default=None)
        parser.add_argument("--currency", default=None)
        parser.add_argument("--completion-code", default=None)
        parser.add_argument("--redirect-url", default=None)
        parser.add_argument(
            "--screen-out-code",
            default=None,
            help="Code for a worker excluded by QC (Prolific's 'screened out' completion code).",
        )
        parser.add_argument(
            "--screen-out-redirect-url", default=None, help="Where an excluded worker is sent."
        )
        parser.add_argument("--status", choices=OPTIONS_BY_NAME["status"].values, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        settings_given = {
            "lease_seconds": options["lease_seconds"],
            "min_seconds_on_clip": options["min_seconds_on_clip"],
            "reason_required_at_or_below": options["reason_at_or_below"],
            "max_assignments_per_worker": options["max_assignments_per_worker"],
            "pay_per_assignment": options["pay_per_assignment"],
            "currency": options["currency"],
            "completion_code": options["completion_code"],
            "redirect_url": options["redirect_url"],
            "screen_out_code": options["screen_out_code"],
            "screen_out_redirect_url": options["screen_out_redirect_url"],
            "status": options["status"],
        }
        try:
            campaign = campaign_create(
                slug=options["slug"],
                name=options["name"] or options["slug"],
                judgments_per_candidate=options["judgments_per_candidate"],
                reference_free=options["reference_free"],
                import_batch_ids=options["import_batch"],
                system_names=options["system"],
                clip_vatex_ids=options["clip_id"] or None,
                clip_limit=options["clips"],
                **{key: value for key, value in settings_given.items() if value is not None},
            )
        except CampaignInvalid as invalid:
            raise CommandError(str(invalid))
        counts = campaign_counts(campaign=campaign)
        self.emit(
            {"slug": campaign.slug, "candidates": counts["candidates"], "clips": counts["clips"]},
            human=f"Created campaign {campaign.slug}: {counts['candidates']} candidates on "
            f"{counts['clips']} clips, {campaign.judgments_per_candidate} judgments each. "
            f"Worker link: /w/{campaign.slug}/",
        )
