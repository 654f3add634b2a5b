"""`manage.py run_qc SLUG [--json] [--async]`: a full quality-control recompute of a campaign."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from annotation.models import Campaign
from annotation.quality.run import qc_run_inline, qc_run_start
from common.management.base import LepusCommand
from common.models import JobStatus


class Command(LepusCommand):
    help = (
        "Recompute worker statistics, apply the campaign's QC rules (excluding workers who trip "
        "them), measure agreement, refresh the review queue and the aggregates. Prints "
        '{"workers", "excluded": [{"worker", "rules"}], "flagged": [{"worker", "rules"}], '
        '"judgments_excluded", "review_items"} with --json: the state after the run (flagged: '
        "workers not excluded whom a rule flags, for a curator to look at)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("slug", help="Campaign slug.")
        parser.add_argument(
            "--async",
            action="store_true",
            dest="run_async",
            help="Queue the run for a Celery worker instead of running it here.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = Campaign.objects.filter(slug=options["slug"]).first()
        if campaign is None:
            raise CommandError(f"no campaign with slug {options['slug']!r}")
        if options["run_async"]:
            run = qc_run_start(campaign=campaign)
            self.emit({"run": run.pk, "status": run.status}, f"QC run {run.pk} queued.")
            return
        self.note(f"QC run of {campaign.slug}…")
        run = qc_run_inline(campaign=campaign)
        if run.status != JobStatus.SUCCEEDED:
            raise CommandError(f"QC run {run.pk} {run.status}: {run.error.splitlines()[0:1]}")
        summary = run.summary
        payload = {
            "workers": summary["workers"],
            "excluded": summary["excluded"],
            "flagged": summary["flagged"],
            "judgments_excluded": summary["judgments_excluded"],
            "review_items": summary["review_items"],
        }
        lines = [
            f"Workers: {payload['workers']}",
            f"Excluded workers: {len(payload['excluded'])}",
            *[f"  {row['worker']}: {', '.join(row['rules'])}" for row in payload["excluded"]],
            f"Flagged workers (not excluded): {len(payload['flagged'])}",
            *[f"  {row['worker']}: {', '.join(row['rules'])}" for row in payload["flagged"]],
            f"Judgments excluded: {payload['judgments_excluded']}",
            f"Review queue: {payload['review_items']}",
        ]
        self.emit(payload, "\n".join(lines))
