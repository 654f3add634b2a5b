"""Create a crowd campaign over the matching candidates (all model outputs by default).

    python manage.py create_campaign --slug SLUG [--judgments-per-candidate K] [--clips N]
        [--system NAME] [--reference-free] [--json]

prints {"slug": ..., "candidates": n, "clips": n} with --json. Clips whose video is not ready yet
are included; the engine serves them once they are (`--clips N` takes ready clips first).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from annotation.crowd.campaign_options import OPTIONS_BY_NAME
from annotation.crowd.services.campaigns import CampaignInvalid, campaign_counts, campaign_create
from common.management.arguments import command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg, flag


def _repeatable(name: str, metavar: str, help: str, **options: Any) -> Arg:
    return Arg(name, action="append", default=[], metavar=metavar, help=help, **options)


# The campaign settings the command passes on only when given: (option row, service keyword).
SETTINGS = (
    (Arg("--lease-seconds", type=int, default=None), "lease_seconds"),
    (Arg("--min-seconds-on-clip", type=int, default=None), "min_seconds_on_clip"),
    (Arg("--reason-at-or-below", type=int, default=None), "reason_required_at_or_below"),
    (Arg("--max-assignments-per-worker", type=int, default=None), "max_assignments_per_worker"),
    (Arg("--pay-per-assignment", type=Decimal, default=None), "pay_per_assignment"),
    (Arg("--currency", default=None), "currency"),
    (Arg("--completion-code", default=None), "completion_code"),
    (Arg("--redirect-url", default=None), "redirect_url"),
    (
        Arg(
            "--screen-out-code",
            default=None,
            help="Code for a worker excluded by QC (Prolific's 'screened out' completion code).",
        ),
        "screen_out_code",
    ),
    (
        Arg("--screen-out-redirect-url", default=None, help="Where an excluded worker is sent."),
        "screen_out_redirect_url",
    ),
    (Arg("--status", choices=OPTIONS_BY_NAME["status"].values, default=None), "status"),
)


class Command(LepusCommand):
    """Create a crowd campaign over the matching candidates (all by default)."""

    arguments = (
        Arg("--slug", required=True, help="Campaign slug (worker link /w/SLUG/)."),
        Arg("--name", default="", help="Display name (default: the slug)."),
        Arg("--judgments-per-candidate", type=int, default=3, metavar="K"),
        Arg("--clips", type=int, default=None, metavar="N", help="At most N clips (ready first)."),
        _repeatable("--system", "NAME", "Only candidates of this captioning system (repeatable)."),
        _repeatable(
            "--import-batch", "ID", "Only candidates of this import batch (repeatable).", type=int
        ),
        _repeatable("--clip-id", "VATEX_ID", "Only this clip (repeatable)."),
        flag("--reference-free"),
        *(row for row, _ in SETTINGS),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        settings_given = {keyword: options[row.key] for row, keyword in SETTINGS}
        with command_errors(CampaignInvalid):
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
        counts = campaign_counts(campaign=campaign)
        self.emit(
            {"slug": campaign.slug, "candidates": counts["candidates"], "clips": counts["clips"]},
            human=f"Created campaign {campaign.slug}: {counts['candidates']} candidates on "
            f"{counts['clips']} clips, {campaign.judgments_per_candidate} judgments each. "
            f"Worker link: /w/{campaign.slug}/",
        )
