"""Test-retest repeats: serving a worker a clip they already rated again, and storing the second
ratings apart.

A campaign with `retest_share` > 0 serves each worker, unannounced, about that share of the clips
they submitted a second time, later in the same session:

* A repeat is due when `repeats served < floor(retest_share x clips submitted)`; it is served in
  place of a fresh clip, and only while fresh work remains for the worker and they are within
  `max_assignments_per_worker` (a repeat never prolongs a session or keeps a worker from their
  completion code).
* Its clip is one the worker submitted at least `retest_min_gap` clips ago, not repeated before
  (each clip at most once per worker), and never the clip served last — so never the same clip
  twice in a row. Its candidates are the ones the worker rated then, in a fresh random order.
* It looks like any assignment: the id comes from the assignment id sequence, the payload is the
  same, and submitting it answers the same body. It takes no quota slot and moves no counter that
  payments or limits read (`assignments_submitted`, `active_ms_total`, `Assignment`).
* Its ratings are `RepeatJudgment` rows, linked to the first `Judgment` of the same candidate;
  aggregates, agreement, calibration, review and releases read `Judgment` only, so they cannot
  count a repeat. `annotation.quality.repeats` measures the consistency from the pairs.

Lock order is the engine's (participation first): the claim runs under the participation lock
taken in `services.assignment`, and the submit locks the participation before the repeat.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from annotation.crowd.services import crowd_sql as sql
from annotation.crowd.services.offers import MEDIA_COLUMNS, Offer, clip_references
from annotation.crowd.services.ratings import Rating, SubmitResult
from annotation.models import (
    Assignment,
    AssignmentStatus,
    Campaign,
    Judgment,
    Participation,
    Repeat,
    RepeatJudgment,
)
from datasets_app.models import Clip

_random = random.SystemRandom()


# --- ids -----------------------------------------------------------------------------------------


def _lease_id_next() -> int:
    """The next id of the assignment id sequence, so repeats and assignments share one id space
    (the worker API's `assignment_id`) and a repeat's id gives nothing away."""
    row = sql.fetchone("SELECT nextval(pg_get_serial_sequence(%s, 'id'))", [sql.T_ASSIGNMENT])
    assert row is not None
    return int(row[0])


# --- claiming (called by services.assignment under the participation lock) ----------------------


def _offer(
    lease: tuple[int, datetime, datetime],
    campaign: Campaign,
    participation_id: int,
    clip_id: int,
    candidate_ids: list[int],
) -> Offer:
    """The repeat as the offer `assignment_offer_payload` renders; `lease` is (repeat id, issued
    at, expires at)."""
    texts = dict(
        Judgment.objects.filter(
            participation_id=participation_id, campaign_candidate_id__in=candidate_ids
        ).values_list("campaign_candidate_id", "campaign_candidate__candidate__text")
    )
    media = Clip.objects.values_list(*MEDIA_COLUMNS).get(pk=clip_id)
    return Offer.of_clip(
        media,
        lease=lease,
        clip_id=clip_id,
        candidates=((candidate_id, texts[candidate_id]) for candidate_id in candidate_ids),
        references=clip_references(campaign=campaign, clip_id=clip_id),
    )


def repeat_live_claim(
    *, participation: Participation, campaign: Campaign, now: datetime
) -> Offer | None:
    """The worker's live repeat if its lease still runs (a reload gets the same one back); a
    repeat whose lease ran out is marked expired here (it holds no slot to return)."""
    live = (
        Repeat.objects.filter(participation_id=participation.pk, status=AssignmentStatus.LIVE)
        .values_list("id", "clip_id", "issued_at", "expires_at", "candidate_ids")
        .first()
    )
    if live is None:
        return None
    repeat_id, clip_id, issued_at, expires_at, candidate_ids = live
    if expires_at <= now:
        Repeat.objects.filter(pk=repeat_id, status=AssignmentStatus.LIVE).update(
            status=AssignmentStatus.EXPIRED
        )
        return None
    lease = (repeat_id, issued_at, expires_at)
    return _offer(lease, campaign, participation.pk, clip_id, candidate_ids)


def repeats_due(*, share: float, submitted: int, served: int) -> bool:
    """Whether one more repeat is owed after `submitted` clips with `served` repeats so far."""
    return served < int(share * submitted + 1e-9)


def repeat_clip_choose(
    *, submitted: list[tuple[int, int]], repeated: set[int], last_clip: int | None, gap: int
) -> tuple[int, int] | None:
    """One (assignment id, clip id) of `submitted` (newest first) to repeat: at least `gap` clips
    old, not repeated before, not the clip served last; None when there is none."""
    eligible = [
        (assignment_id, clip_id)
        for assignment_id, clip_id in submitted[gap:]
        if clip_id not in repeated and clip_id != last_clip
    ]
    return _random.choice(eligible) if eligible else None


def repeat_claim(
    *, participation: Participation, campaign: Campaign, submitted: int, now: datetime
) -> Offer | None:
    """A new repeat for the worker if one is due and a clip qualifies, else None (the caller then
    serves a fresh clip). The caller holds the participation lock and has no live lease."""
    served = Repeat.objects.filter(participation_id=participation.pk).values_list(
        "clip_id", "issued_at"
    )
    repeated = dict(served)
    if not repeats_due(share=campaign.retest_share, submitted=submitted, served=len(repeated)):
        return None
    originals = list(
        Assignment.objects.filter(
            participation_id=participation.pk, status=AssignmentStatus.SUBMITTED
        )
        .order_by("-submitted_at", "-id")
        .values_list("id", "clip_id", "issued_at")
    )
    # The clip served last, original or repeat: a repeat never follows its own clip.
    last = max(
        [(issued_at, clip_id) for _id, clip_id, issued_at in originals]
        + [(issued_at, clip_id) for clip_id, issued_at in repeated.items()],
        default=None,
    )
    chosen = repeat_clip_choose(
        submitted=[(assignment_id, clip_id) for assignment_id, clip_id, _at in originals],
        repeated=set(repeated),
        last_clip=last[1] if last else None,
        gap=campaign.retest_min_gap,
    )
    if chosen is None:
        return None
    original_id, clip_id = chosen
    candidate_ids = list(
        Judgment.objects.filter(
            participation_id=participation.pk, assignment_id=original_id
        ).values_list("campaign_candidate_id", flat=True)
    )
    if not candidate_ids:
        return None
    _random.shuffle(candidate_ids)
    expires_at = now + timedelta(seconds=campaign.lease_seconds)
    repeat = Repeat.objects.create(
        id=_lease_id_next(),
        campaign_id=campaign.pk,
        participation_id=participation.pk,
        original_id=original_id,
        clip_id=clip_id,
        candidate_ids=candidate_ids,
        status=AssignmentStatus.LIVE,
        issued_at=now,
        expires_at=expires_at,
    )
    lease = (repeat.pk, now, expires_at)
    return _offer(lease, campaign, participation.pk, clip_id, candidate_ids)


def repeat_live_id(*, participation_id: int, now: datetime) -> int | None:
    """The id of the worker's live, unexpired repeat (for `GET /worker/me`)."""
    return (
        Repeat.objects.filter(
            participation_id=participation_id, status=AssignmentStatus.LIVE, expires_at__gt=now
        )
        .values_list("id", flat=True)
        .first()
    )


# --- submitting (called by services.submission) -------------------------------------------------


def repeat_for_submit(*, participation_id: int, repeat_id: int) -> Repeat | None:
    return Repeat.objects.filter(pk=repeat_id, participation_id=participation_id).first()


def repeat_store(
    *,
    repeat: Repeat,
    ratings: list[Rating],
    digest: str,
    result: SubmitResult,
    now: datetime,
) -> bool:
    """Mark the repeat submitted (from live or expired: a repeat holds no slot, so a late submit
    is fine) and store its ratings; False when a concurrent submit got there first. The caller
    holds the participation lock inside a transaction."""
    server_ms = max(0, int((now - repeat.issued_at).total_seconds() * 1000))
    marked = Repeat.objects.filter(
        pk=repeat.pk, status__in=[AssignmentStatus.LIVE, AssignmentStatus.EXPIRED]
    ).update(
        status=AssignmentStatus.SUBMITTED,
        submitted_at=now,
        submission_digest=digest,
        result=result,
        server_ms=server_ms,
    )
    if not marked:
        return False
    originals = dict(
        Judgment.objects.filter(
            participation_id=repeat.participation_id,
            campaign_candidate_id__in=[rating["candidate_id"] for rating in ratings],
        ).values_list("campaign_candidate_id", "id")
    )
    RepeatJudgment.objects.bulk_create(
        [
            RepeatJudgment(
                repeat_id=repeat.pk,
                campaign_id=repeat.campaign_id,
                participation_id=repeat.participation_id,
                original_id=originals[rating["candidate_id"]],
                values=rating["values"],
                created_at=now,
            )
            for rating in ratings
            if rating["candidate_id"] in originals
        ]
    )
    return True


def repeat_touch_participation(*, participation_id: int, now: datetime, excluded: str) -> bool:
    """Lock the participation (the engine's lock order) and note the visit, without moving any
    counter that payments read; False when the participation has been excluded."""
    return bool(
        sql.execute(
            f"UPDATE {sql.T_PARTICIPATION} SET last_seen_at = %s WHERE id = %s AND status <> %s",
            [now, participation_id, excluded],
        )
    )
