"""Base classes of the commands that act on one campaign given by its slug.

`CampaignCommand` takes the positional SLUG and resolves it (a clear error when there is none);
`CampaignRunCommand` adds `--async` for the campaign's background runs (QC, calibration): queue
the run for a Celery worker, or run it here, fail loudly unless it succeeded, and report it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.management.base import CommandError

from annotation.models import Campaign
from common.management.arguments import found
from common.management.base import LepusCommand
from common.management.declared import Arg, Row
from common.models import Job, JobStatus


def campaign_by_slug(slug: str) -> Campaign:
    """The campaign, or the command's error naming the slug (every command that takes one)."""
    return found(Campaign.objects.filter(slug=slug).first(), f"no campaign with slug {slug!r}")


class CampaignCommand(LepusCommand):
    arguments: ClassVar[tuple[Row, ...]] = (Arg("slug", help="Campaign slug."),)

    def campaign(self, options: dict[str, Any]) -> Campaign:
        return campaign_by_slug(options["slug"])


class CampaignRunCommand(CampaignCommand):
    run_label = "Run"  # "QC run", "Calibration run": how messages name the run
    arguments: ClassVar[tuple[Row, ...]] = (
        Arg(
            "--async",
            action="store_true",
            dest="run_async",
            help="Queue the run for a Celery worker instead of running it here.",
        ),
    )

    def run_start(self, campaign: Campaign) -> Job:
        """Queue a run (or return the one already queued or running)."""
        raise NotImplementedError

    def run_inline(self, campaign: Campaign) -> Job:
        """Run it in this process; return the finished run."""
        raise NotImplementedError

    def report(self, campaign: Campaign, run: Any, options: dict[str, Any]) -> None:
        """Emit the succeeded run's figures."""
        raise NotImplementedError

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = self.campaign(options)
        if options["run_async"]:
            run = self.run_start(campaign)
            self.emit({"run": run.pk, "status": run.status}, f"{self.run_label} {run.pk} queued.")
            return
        self.note(f"{self.run_label} of {campaign.slug}…")
        run = self.run_inline(campaign)
        if run.status != JobStatus.SUCCEEDED:
            reason = run.error.splitlines()[0] if run.error else ""
            raise CommandError(f"{self.run_label} {run.pk} {run.status}: {reason[:500]}")
        self.report(campaign, run, options)
