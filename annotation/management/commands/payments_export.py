"""What each worker of a campaign is owed, as CSV.

    python manage.py payments_export --campaign SLUG [--format prolific|full] [--output FILE]

`prolific` (default): Prolific's bulk bonus lines `<PROLIFIC_PID>,<amount>` (two decimals, the
study currency, no header); `full`: every crowd worker with assignments, active time, amount.
Without --output the CSV goes to stdout; with --json (needs --output) a summary is printed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from annotation.crowd.services.payments import (
    payments_full_csv,
    payments_prolific_bonus_csv,
    payments_total,
)
from annotation.models import Campaign
from common.management.arguments import found
from common.management.base import LepusCommand
from common.management.declared import Arg


class Command(LepusCommand):
    """Export what each worker of a campaign is owed (Prolific bulk bonus or full CSV)."""

    arguments = (
        Arg("--campaign", required=True, metavar="SLUG"),
        Arg("--format", choices=["prolific", "full"], default="prolific"),
        Arg("--output", default=None, help="Write the CSV here."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = found(
            Campaign.objects.filter(slug=options["campaign"]).first(),
            f"no campaign {options['campaign']!r}",
        )
        if self.as_json and not options["output"]:
            raise CommandError("--json needs --output (stdout carries the JSON summary)")
        skipped: list[str] = []
        if options["format"] == "prolific":
            text, skipped = payments_prolific_bonus_csv(campaign=campaign)
        else:
            text = payments_full_csv(campaign=campaign)
        for external_id in skipped:
            self.note(f"left out {external_id!r}: not a Prolific participant id")
        if not options["output"]:
            self.stdout.write(text, ending="")
            return
        Path(options["output"]).write_text(text, encoding="utf-8")
        total = payments_total(campaign=campaign)
        self.emit(
            {
                "campaign": campaign.slug,
                "format": options["format"],
                "output": options["output"],
                "lines": text.count("\n"),
                "skipped": skipped,
                **total,
            },
            human=f"Wrote {options['output']}: {total['workers']} workers, {total['amount']} "
            f"{total['currency']} owed.",
        )
