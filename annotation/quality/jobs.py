"""Queueing a campaign's background runs (QC runs, calibrations): at most one queued or running
per campaign and kind."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from annotation.models import Campaign


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
