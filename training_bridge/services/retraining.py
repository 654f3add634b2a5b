"""Scheduled retraining (celery beat runs `training_bridge.check_retraining` every 10 minutes).

When at least `LEPUS_RETRAIN_MIN_NEW_CANDIDATES` candidates were finalised since the last release,
build a release of the campaigns that have finalised candidates, and once it is published start a
training run on it. One row (`RetrainingState`) is locked for the whole decision, so two beats or two
workers never start two at once; and nothing new starts while the pending release or the last
scheduled run is still active.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from common.models import ACTIVE_JOB_STATUSES, JobStatus
from training_bridge.models import RetrainingState, TrainingRun, TrainingTrigger

logger = logging.getLogger(__name__)


def finalised_candidates_since_last_release() -> tuple[int, Any]:
    """(count of candidates finalised after the latest release was requested, that release)."""
    from annotation.models import CampaignCandidate
    from export.models import Release

    latest = Release.objects.exclude(status=JobStatus.FAILED).order_by("-created_at", "-id").first()
    candidates = CampaignCandidate.objects.filter(
        is_finalised=True, is_control=False, dropped=False
    )
    if latest is not None:
        candidates = candidates.filter(finalised_at__gt=latest.created_at)
    return candidates.count(), latest


def _campaigns_with_finalised_candidates() -> list[Any]:
    from annotation.models import Campaign

    return list(Campaign.objects.filter(items__is_finalised=True, items__dropped=False).distinct())


def retraining_check(*, dry_run: bool = False) -> dict[str, Any]:
    """One beat of the schedule; returns what it decided (also stored on the state row)."""
    minimum = settings.LEPUS_RETRAIN_MIN_NEW_CANDIDATES
    with transaction.atomic():
        RetrainingState.objects.get_or_create(singleton=1)
        # nowait=False: a concurrent beat waits here and then sees the first one's decision.
        state = RetrainingState.objects.select_for_update().get(singleton=1)
        outcome: dict[str, Any] = {"action": "none", "minimum": minimum}
        pending = state.pending_release
        if pending is not None:
            if pending.status == JobStatus.SUCCEEDED:
                outcome.update(action="start_run", release=pending.pk)
                if not dry_run:
                    try:
                        run = _start_run(release=pending)
                    except ValidationError as refused:
                        # Nothing to train on (e.g. no clip with a video): say why, and wait
                        # for the next release rather than refusing this one at every beat.
                        outcome.update(action="run_refused", reason="; ".join(refused.messages))
                    else:
                        state.last_run = run
                        outcome["run"] = run.pk
                    state.pending_release = None
            elif pending.status in (JobStatus.FAILED, JobStatus.CANCELLED):
                outcome.update(action="release_failed", release=pending.pk)
                if not dry_run:
                    state.pending_release = None
            else:
                outcome.update(action="waiting_for_release", release=pending.pk)
        elif state.last_run is not None and state.last_run.status in ACTIVE_JOB_STATUSES:
            outcome.update(action="run_active", run=state.last_run.pk)
        else:
            count, latest = finalised_candidates_since_last_release()
            outcome.update(new_candidates=count, since_release=latest.pk if latest else None)
            if count >= minimum:
                campaigns = _campaigns_with_finalised_candidates()
                outcome.update(action="build_release", campaigns=[c.slug for c in campaigns])
                if not dry_run and campaigns:
                    release = request_release(campaigns=campaigns)
                    state.pending_release = release
                    outcome["release"] = release.pk
        if not dry_run:
            state.last_checked_at = timezone.now()
            state.last_outcome = str(outcome.get("action"))[:300]
            state.save()
    if outcome["action"] != "none":
        logger.info("retraining check: %s", outcome)
    return outcome


def request_release(*, campaigns: list[Any]) -> Any:
    """Ask the export app for a release of these campaigns (built by its own Celery job)."""
    from export.services import release_create

    return release_create(campaigns=campaigns, name=f"scheduled-{timezone.now():%Y%m%d-%H%M%S}")


def _start_run(*, release: Any) -> TrainingRun:
    from training_bridge.services.runs import training_run_create

    return training_run_create(
        release=release,
        backbone=settings.LEPUS_DEFAULT_BACKBONE,
        device=settings.LEPUS_TRAINING_DEVICE,
        processes=settings.LEPUS_TRAINING_PROCESSES,
        trigger=TrainingTrigger.SCHEDULE,
        name=f"scheduled on {release.name}"[:200],
    )
