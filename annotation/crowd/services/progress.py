"""Where a worker stands in a campaign: the clips it could still be served, its live lease, and
what `GET /api/v1/worker/me` answers (`participation_progress`)."""

from __future__ import annotations

from typing import TypedDict

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from annotation.crowd.services import repeats
from annotation.models import (
    Assignment,
    AssignmentStatus,
    CampaignClip,
    CampaignStatus,
    Participation,
    ParticipationStatus,
)
from datasets_app.models import ClipStatus


class Progress(TypedDict):
    """The body of `GET /api/v1/worker/me`."""

    campaign: str
    state: str  # "working", "finished", "no_work" or "stopped"
    assignments_done: int
    remaining_estimate: int
    live_assignment_id: int | None
    max_assignments: int | None
    completion_code: str | None
    redirect_url: str | None


# --- selectors ---------------------------------------------------------------------------------


def clips_open_for(*, participation: Participation) -> QuerySet[CampaignClip]:
    """Clips of the participation's campaign that could be served to it now: servable video (or
    still image), open slots, and never given to this worker before."""
    return (
        CampaignClip.objects.filter(
            campaign_id=participation.campaign_id,
            open_slots__gt=0,
            clip__status=ClipStatus.READY,
        )
        .filter(~Q(clip__video_key="") | ~Q(clip__image_key=""))
        .exclude(
            Exists(
                Assignment.objects.filter(
                    participation_id=participation.pk, clip_id=OuterRef("clip_id")
                )
            )
        )
    )


def participation_live_assignment(*, participation: Participation) -> Assignment | None:
    return (
        Assignment.objects.filter(participation_id=participation.pk, status=AssignmentStatus.LIVE)
        .order_by("-id")
        .first()
    )


# --- progress ----------------------------------------------------------------------------------


def participation_progress(*, participation: Participation, cap: int = 1000) -> Progress:
    """What `GET /api/v1/worker/me` answers: assignments done, an estimate of what remains, and
    once finished the completion code or redirect URL.

    `state`: "working" (a lease is live or clips remain), "finished" (at least one assignment
    submitted and nothing left for this worker: here is the code), "no_work" (nothing was left
    before this worker did anything), "stopped" (paused, or the campaign is not active). An
    excluded worker never gets here: the worker API answers the screen-out
    (`annotation.crowd.services.workers.screen_out_payload`)."""
    campaign = participation.campaign
    fresh = Participation.objects.filter(pk=participation.pk).values_list(
        "assignments_submitted", "status", "completed_at"
    )
    done, status, completed_at = fresh.get()
    live = participation_live_assignment(participation=participation)
    now = timezone.now()
    live_id = live.pk if live is not None and live.expires_at > now else None
    if live_id is None and campaign.retest_share:
        live_id = repeats.repeat_live_id(participation_id=participation.pk, now=now)
    if campaign.max_assignments_per_worker is not None:
        allowed = max(0, campaign.max_assignments_per_worker - done)
    else:
        allowed = cap
    remaining = 0
    if (
        allowed
        and status == ParticipationStatus.ACTIVE
        and campaign.status == CampaignStatus.ACTIVE
    ):
        remaining = clips_open_for(participation=participation).values("id")[:allowed].count()
    if status != ParticipationStatus.ACTIVE or campaign.status != CampaignStatus.ACTIVE:
        state = "stopped"
    elif live_id is not None or remaining > 0:
        state = "working"
    elif done > 0:
        state = "finished"
    else:
        state = "no_work"
    if state == "finished" and completed_at is None:
        Participation.objects.filter(pk=participation.pk, completed_at__isnull=True).update(
            completed_at=now
        )
    finished = state == "finished"
    return {
        "campaign": campaign.slug,
        "state": state,
        "assignments_done": done,
        "remaining_estimate": remaining,
        "live_assignment_id": live_id,
        "max_assignments": campaign.max_assignments_per_worker,
        "completion_code": (campaign.completion_code or None) if finished else None,
        "redirect_url": (campaign.redirect_url or None) if finished else None,
    }
