"""Start a Vid-Lepus release build (a Celery job), optionally waiting for it to finish.

    python manage.py build_release --campaign SLUG [--campaign SLUG2 ...] [--seed N]
        [--ratios 0.8,0.1,0.1] [--name NAME] [--raw-judgments] [--wait [--timeout S] | --inline] --json

prints {"release": id, "status": ..., "files": {"<relative path>": "<sha256>"}, "location": ...}.
`--wait` polls the database until a Celery worker has finished the job; `--inline` builds in this
process instead (no worker needed; the same code). The exit status is 1 when the build failed or
was cancelled, 2 when --wait timed out.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from annotation.models import Campaign
from common.management.arguments import command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg, OneOf, flag
from common.models import JobStatus
from export.models import Release
from export.services import DEFAULT_SEED, release_build, release_create
from export.splitting import DEFAULT_RATIOS


def parse_ratios(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise CommandError(f"--ratios {text!r}: expected numbers separated by commas")


class Command(LepusCommand):
    """Build a Vid-Lepus release of one or more campaigns (a Celery job)."""

    arguments = (
        Arg("--campaign", action="append", required=True, dest="campaigns", help="Campaign slug."),
        Arg("--seed", type=int, default=DEFAULT_SEED),
        Arg(
            "--ratios",
            default=",".join(str(ratio) for ratio in DEFAULT_RATIOS),
            help="train,validation[,test] (default 0.8,0.1,0.1: a test split for the results)",
        ),
        Arg("--name", default=None),
        flag(
            "--raw-judgments",
            help="Include the kept judgments with pseudonymous worker ids.",
        ),
        OneOf(
            (
                flag("--wait", help="Wait until a Celery worker has built it."),
                flag(
                    "--inline",
                    help="Build in this process instead of a worker.",
                ),
            )
        ),
        Arg("--timeout", type=float, default=3600.0, help="Seconds --wait waits at most."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        slugs = list(dict.fromkeys(options["campaigns"]))
        campaigns = list(Campaign.objects.filter(slug__in=slugs))
        missing = sorted(set(slugs) - {campaign.slug for campaign in campaigns})
        if missing:
            raise CommandError(f"unknown campaign(s): {', '.join(missing)}")
        with command_errors(ValidationError):
            release = release_create(
                campaigns=campaigns,
                seed=options["seed"],
                ratios=parse_ratios(options["ratios"]),
                name=options["name"],
                include_raw_judgments=options["raw_judgments"],
            )
        if not self.as_json:
            self.note(f"release {release.pk} queued")
        if options["inline"]:
            release_build(release_id=release.pk)
        elif options["wait"]:
            release = self._wait(release, timeout=options["timeout"])
        release.refresh_from_db()
        self.emit(
            {
                "release": release.pk,
                "status": release.status,
                "files": release.files if release.status == JobStatus.SUCCEEDED else {},
                "location": release.location,
            },
            human=f"release {release.pk}: {release.status} at {release.location}"
            + (f"\n{release.error}" if release.error else ""),
        )
        if release.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            raise SystemExit(1)
        if (options["wait"] or options["inline"]) and release.status != JobStatus.SUCCEEDED:
            raise SystemExit(2)

    def _wait(self, release: Release, *, timeout: float) -> Release:
        deadline = time.monotonic() + timeout
        bar = self.progress_bar(total=100, description=f"release {release.pk}")
        try:
            while time.monotonic() < deadline:
                release.refresh_from_db()
                bar.n = release.progress_percent
                bar.set_postfix_str(release.progress_message[:60])
                if release.is_finished:
                    break
                time.sleep(0.5)
        finally:
            bar.close()
        return release
