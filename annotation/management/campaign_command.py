"""Base classes of the commands that act on one campaign given by its slug.

`CampaignCommand` takes the positional SLUG and resolves it (a clear error when there is none);
`CampaignRunCommand` adds `--async` for the campaign's background runs (QC, calibration): queue
the run for a Celery worker, or run it here, fail loudly unless it succeeded, and report it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from django.core.management.base import CommandError

from annotation.models import Campaign
from common.management.arguments import found
from common.management.base import LepusCommand
from common.management.declared import Arg, Row, flag
from common.models import Job, JobStatus


def campaign_by_slug(slug: str) -> Campaign:
    """The campaign, or the command's error naming the slug (every command that takes one)."""
    return found(Campaign.objects.filter(slug=slug).first(), f"no campaign with slug {slug!r}")


class CampaignCommand(LepusCommand):
    arguments: ClassVar[tuple[Row, ...]] = (Arg("slug", help="Campaign slug."),)

    def campaign(self, options: dict[str, Any]) -> Campaign:
        return campaign_by_slug(options["slug"])


@dataclass(frozen=True)
class RunServices:
    """The two services of a campaign's background run, each called with `campaign=`."""

    label: str  # "QC run", "Calibration run": how messages name the run
    start: Callable[..., Job]  # queue a run (or return the one already queued or running)
    inline: Callable[..., Job]  # run it in this process; return the finished run


class CampaignRunCommand(CampaignCommand):
    runs: ClassVar[RunServices]
    arguments: ClassVar[tuple[Row, ...]] = (
        flag(
            "--async",
            dest="run_async",
            help="Queue the run for a Celery worker instead of running it here.",
        ),
    )

    def report(self, campaign: Campaign, run: Any, options: dict[str, Any]) -> None:
        """Emit the succeeded run's figures."""
        raise NotImplementedError

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = self.campaign(options)
        label = self.runs.label
        if options["run_async"]:
            run = self.runs.start(campaign=campaign)
            self.emit({"run": run.pk, "status": run.status}, f"{label} {run.pk} queued.")
            return
        self.note(f"{label} of {campaign.slug}…")
        run = self.runs.inline(campaign=campaign)
        if run.status != JobStatus.SUCCEEDED:
            reason = run.error.splitlines()[0] if run.error else ""
            raise CommandError(f"{label} {run.pk} {run.status}: {reason[:500]}")
        self.report(campaign, run, options)
