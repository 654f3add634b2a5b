"""Queueing a campaign's background runs (QC runs, calibrations): at most one queued or running
per campaign and kind; or running one in this process (the management commands)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import models, transaction

from annotation.models import Campaign

Run = TypeVar("Run", bound=models.Model)
# What a run reports as it goes: the share done (0..1) and the step it is on.
ProgressCallback = Callable[[float, str], None]


def campaign_run_inline(
    *, model: type[Run], campaign: Campaign, execute: Callable[..., Any]
) -> Run:
    """A run executed in this process: the same run row and job lifecycle as a queued run
    (`execute(run_id=)`), without the broker. Returns the finished run."""
    run = model._default_manager.create(campaign=campaign)
    execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def campaign_run_queue(
    *, model: type[Any], campaign: Campaign, task: Any, requested_by: Any = None, **fields: Any
) -> Any:
    """Queue a background run of the campaign (QC, calibration), or return the one already
    queued or running: the campaign row is locked, so two requests never queue two runs."""
    from common.tasks import enqueue

    with transaction.atomic():
        Campaign.objects.select_for_update().filter(pk=campaign.pk).first()
        active = model.objects.filter(campaign=campaign).active().first()
        if active is not None:
            return active
        run = model.objects.create(
            campaign=campaign,
            requested_by=requested_by if getattr(requested_by, "pk", None) else None,
            **fields,
        )
        enqueue(task, run.pk)
    return run
