"""The assignment engine: which clip a worker rates next, leases, and returning expired slots.

Guarantees on PostgreSQL under many concurrent workers, and how they are kept:

* No candidate gets more live + finished judgments than its quota. `CampaignCandidate.slots_taken`
  counts live assignment slots plus kept judgments; a claim raises it with one
  `UPDATE ... SET slots_taken = slots_taken + 1 WHERE ... AND slots_taken < quota` (the row lock
  re-checks the condition), under the clip's row lock; the CHECK constraint `slots_taken <= quota`
  is the last line.
* No worker gets the same clip twice: the claim query skips clips the worker has any assignment
  for (live, submitted or expired), and UNIQUE(participation, clip) is the last line.
* One live lease per worker: the participation row is locked first, a live unexpired assignment is
  handed back as it is (a page reload burns nothing), and a partial unique index is the last line.
* Expired leases return their slots (`assignments_expire`, run by beat every minute, and inline
  when the worker comes back for more). A late submit re-takes the slots only while they are free.
* Nearly complete clips first: clips are taken in ascending `CampaignClip.open_slots` (an indexed
  column kept in step with the candidates' counters), with `FOR UPDATE SKIP LOCKED` so concurrent
  workers never queue behind each other on the same clip row.

Lock order, everywhere in this module and in `services.submission` (keep it to avoid deadlocks):
Participation → Assignment → CampaignClip → CampaignCandidate. Code outside this module that moves
slot counters (QC exclusions) should call `campaign_candidate_slots_release`, which keeps it too.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from annotation.crowd.services import crowd_sql as sql
from annotation.crowd.services import offers, repeats
from annotation.crowd.services.offers import Offer
from annotation.models import (
    Assignment,
    AssignmentItem,
    AssignmentStatus,
    Campaign,
    CampaignCandidate,
    CampaignClip,
    CampaignStatus,
    Participation,
    ParticipationStatus,
)
from datasets_app.models import ClipStatus

# How many clips one claim may find already full (counter drift repaired on the way) or lose to a
# constraint race before it gives up and answers "nothing for you now".
_CLAIM_ATTEMPTS = 5
_shuffle = random.SystemRandom().shuffle


# --- claiming ----------------------------------------------------------------------------------


def assignment_claim_next(
    *, participation: Participation, now: datetime | None = None
) -> Offer | None:
    """The worker's next offer: its live unexpired lease (or repeat) if it has one, else one new
    clip with the campaign's candidates of that clip that still need judgments; None when nothing
    is left for this worker (or it may not receive work). The offer holds everything
    `assignment_offer_payload` shows."""
    campaign = participation.campaign
    if campaign.status != CampaignStatus.ACTIVE or campaign.is_imported:
        return None
    now = now or timezone.now()
    for _attempt in range(_CLAIM_ATTEMPTS):
        try:
            with transaction.atomic():
                return _claim(participation=participation, campaign=campaign, now=now)
        except IntegrityError:  # a last-line constraint fired: nothing was kept, try again
            continue
    return None


# The hot path in SQL (see crowd_sql for why); the comments name the step of the claim.
_LIVE_COLUMNS = (
    "a.id, a.campaign_id, a.clip_id, a.issued_at, a.expires_at,"
    " cl.video_key, cl.poster_key, cl.duration, cl.modality, cl.image_key"
)
# Steps 1 + 2 in one statement: lock the participation and read its live lease.
_LOCK_AND_LIVE = (
    f"WITH p AS (UPDATE {sql.T_PARTICIPATION} SET last_seen_at = %s WHERE id = %s AND status = %s"
    " RETURNING id, assignments_submitted)"
    f" SELECT p.assignments_submitted, {_LIVE_COLUMNS} FROM p"
    f" LEFT JOIN {sql.T_ASSIGNMENT} a ON a.participation_id = p.id AND a.status = %s"
    f" LEFT JOIN {sql.T_CLIP} cl ON cl.id = a.clip_id"
)
# Step 3, with the clip's references in the same statement unless the campaign is reference-free.
# Rows other transactions are claiming right now are skipped rather than waited for.
_NEXT_CLIP_COLUMNS = (
    "SELECT cc.id, cc.clip_id, cl.video_key, cl.poster_key, cl.duration, cl.modality, cl.image_key"
)
_NEXT_CLIP_FROM = (
    f" FROM {sql.T_CAMPAIGN_CLIP} cc JOIN {sql.T_CLIP} cl ON cl.id = cc.clip_id"
    " WHERE cc.campaign_id = %s AND cc.open_slots > 0 AND cl.status = %s"
    " AND (cl.video_key <> '' OR cl.image_key <> '')"
    f" AND NOT EXISTS (SELECT 1 FROM {sql.T_ASSIGNMENT} seen"
    " WHERE seen.participation_id = %s AND seen.clip_id = cc.clip_id)"
    " ORDER BY cc.open_slots, cc.id LIMIT 1 FOR UPDATE OF cc SKIP LOCKED"
)
_NEXT_CLIP = _NEXT_CLIP_COLUMNS + _NEXT_CLIP_FROM
_NEXT_CLIP_WITH_REFERENCES = (
    _NEXT_CLIP_COLUMNS + f", (SELECT json_agg(r.text ORDER BY r.position) FROM {sql.T_REFERENCE} r"
    " WHERE r.clip_id = cc.clip_id AND r.language = 'en')" + _NEXT_CLIP_FROM
)
# Step 4 in one statement: the candidates' slots and the clip counter by what was taken.
_TAKE_SLOTS_AND_COUNT = (
    f"WITH taken AS (UPDATE {sql.T_CANDIDATE} SET slots_taken = slots_taken + 1"
    " WHERE campaign_id = %s AND clip_id = %s AND slots_taken < quota"
    " RETURNING id, candidate_id),"
    f" counted AS (UPDATE {sql.T_CAMPAIGN_CLIP}"
    " SET open_slots = open_slots - (SELECT count(*) FROM taken)"
    " WHERE id = %s AND EXISTS (SELECT 1 FROM taken))"
    f" SELECT taken.id, cap.text FROM taken JOIN {sql.T_CAPTION} cap ON cap.id = taken.candidate_id"
)
_OFFERED = (
    "SELECT i.campaign_candidate_id, cap.text"
    f" FROM {sql.T_ITEM} i JOIN {sql.T_CANDIDATE} cc ON cc.id = i.campaign_candidate_id"
    f" JOIN {sql.T_CAPTION} cap ON cap.id = cc.candidate_id"
    " WHERE i.assignment_id = %s ORDER BY i.position"
)


@functools.cache
def _new_lease(candidates: int) -> str:
    """Step 5 in one statement: the lease and one item per offered candidate. The item values are
    typed: a prepared statement infers no type for a bare VALUES parameter."""
    pairs = ", ".join(["(%s::bigint, %s::integer)"] * candidates)
    return (
        f"WITH lease AS (INSERT INTO {sql.T_ASSIGNMENT} (campaign_id, participation_id, clip_id,"
        " status, issued_at, expires_at, submission_digest, result)"
        " VALUES (%s, %s, %s, %s, %s, %s, '', %s) RETURNING id)"
        f" INSERT INTO {sql.T_ITEM} (assignment_id, campaign_candidate_id, position)"
        " SELECT lease.id, item.candidate, item.position FROM lease"
        f" CROSS JOIN (VALUES {pairs}) AS item (candidate, position)"
        " RETURNING assignment_id"
    )


class _LiveRow(NamedTuple):
    """What steps 1 + 2 read: the worker's submitted count and its live lease, if any."""

    submitted: int
    assignment_id: int | None
    campaign_id: int
    clip_id: int
    issued_at: datetime
    expires_at: datetime
    video_key: str
    poster_key: str
    duration: float | None
    modality: str
    image_key: str


def _claim(*, participation: Participation, campaign: Campaign, now: datetime) -> Offer | None:
    # 1. Lock the participation (serialises one worker's concurrent requests; re-checks status).
    # 2. Read its live lease. No row lock is needed on it: a submit of the same worker waits for
    # the participation lock, and the sweeper only expires leases whose time is up (handled below
    # under a lock).
    row = sql.fetchone(
        _LOCK_AND_LIVE,
        [now, participation.pk, ParticipationStatus.ACTIVE.value, AssignmentStatus.LIVE.value],
        prepared=True,
    )
    if row is None:
        return None
    live = _LiveRow(*row)
    if live.assignment_id is not None:
        if live.expires_at > now:
            return _live_offer(live=live, campaign=campaign)
        _live_lease_expire(live=live)
    retest = bool(campaign.retest_share)
    if retest:
        live_repeat = repeats.repeat_live_claim(
            participation=participation, campaign=campaign, now=now
        )
        if live_repeat is not None:
            return live_repeat

    maximum = campaign.max_assignments_per_worker
    if maximum is not None and live.submitted >= maximum:
        return None
    return _fresh_claim(
        participation=participation, campaign=campaign, submitted=live.submitted, now=now
    )


def _live_offer(*, live: _LiveRow, campaign: Campaign) -> Offer:
    """The unexpired lease handed back as it is (a page reload burns nothing)."""
    assert live.assignment_id is not None
    return Offer.of_clip(
        live[6:11],
        lease=(live.assignment_id, live.issued_at, live.expires_at),
        clip_id=live.clip_id,
        candidates=sql.fetchall(_OFFERED, [live.assignment_id]),
        references=offers.clip_references(campaign=campaign, clip_id=live.clip_id),
    )


def _live_lease_expire(*, live: _LiveRow) -> None:
    """The lease's time is up: return its slots, unless the sweeper got there first."""
    assignment_id = live.assignment_id
    assert assignment_id is not None
    if (
        Assignment.objects.select_for_update()
        .filter(pk=assignment_id, status=AssignmentStatus.LIVE)
        .exists()
    ):
        _expire_locked(
            assignment_id=assignment_id, campaign_id=live.campaign_id, clip_id=live.clip_id
        )


def _fresh_claim(
    *, participation: Participation, campaign: Campaign, submitted: int, now: datetime
) -> Offer | None:
    """Steps 3 to 5: a clip the worker has not seen, a slot on each of its open candidates, and
    the lease (or, with test-retest, a due repeat in place of the clip)."""
    with_references = not campaign.reference_free
    for _clip_attempt in range(_CLAIM_ATTEMPTS):
        # 3. The most nearly complete clip this worker has not seen.
        row = sql.fetchone(
            _NEXT_CLIP_WITH_REFERENCES if with_references else _NEXT_CLIP,
            [campaign.pk, ClipStatus.READY.value, participation.pk],
            prepared=True,
        )
        if row is None:
            return None
        # Test-retest: a due repeat is served in place of the fresh clip (only while fresh work
        # remains, so a repeat never prolongs a session); it takes no slot.
        if campaign.retest_share:
            repeat = repeats.repeat_claim(
                participation=participation, campaign=campaign, submitted=submitted, now=now
            )
            if repeat is not None:
                return repeat
        campaign_clip_id, clip_id = row[0], row[1]

        # 4. One slot on each of its candidates that still has one free, and the clip counter.
        # The UPDATE re-checks `slots_taken < quota` on each row it locks, so it never overfills
        # even if something else moved a counter meanwhile.
        offered = sql.fetchall(
            _TAKE_SLOTS_AND_COUNT, [campaign.pk, clip_id, campaign_clip_id], prepared=True
        )
        if not offered:
            # The clip counter had drifted (e.g. a quota edit raced); repair it and move on.
            _campaign_clip_recount(campaign_clip_id=campaign_clip_id)
            continue
        return _lease_create(
            participation=participation,
            campaign=campaign,
            clip_row=row,
            offered=offered,
            references=tuple(sql.py_json(row[7]) or ()) if with_references else (),
            now=now,
        )
    return None


def _lease_create(
    *,
    participation: Participation,
    campaign: Campaign,
    clip_row: Sequence[Any],
    offered: Sequence[Sequence[Any]],
    references: tuple[str, ...],
    now: datetime,
) -> Offer:
    """5. The lease and its items. Candidates are shown in a fresh random order (no position
    bias, and control items sit anywhere)."""
    clip_id = clip_row[1]
    candidates = [(candidate_id, text) for candidate_id, text in offered]
    _shuffle(candidates)
    expires_at = now + timedelta(seconds=campaign.lease_seconds)
    (assignment_id,) = sql.fetchone(  # type: ignore[misc]
        _new_lease(len(candidates)),
        [
            campaign.pk,
            participation.pk,
            clip_id,
            AssignmentStatus.LIVE.value,
            now,
            expires_at,
            sql.db_json(Assignment, "result", {}),
            *[
                value
                for index, (candidate_id, _text) in enumerate(candidates)
                for value in (candidate_id, index)
            ],
        ],
        prepared=True,
    )
    return Offer.of_clip(
        clip_row[2:7],
        lease=(assignment_id, now, expires_at),
        clip_id=clip_id,
        candidates=candidates,
        references=references,
    )


def _campaign_clip_recount(*, campaign_clip_id: int) -> None:
    campaign_clip = CampaignClip.objects.get(pk=campaign_clip_id)
    open_slots = sum(
        quota - taken
        for quota, taken in CampaignCandidate.objects.filter(
            campaign_id=campaign_clip.campaign_id, clip_id=campaign_clip.clip_id
        ).values_list("quota", "slots_taken")
    )
    CampaignClip.objects.filter(pk=campaign_clip_id).update(open_slots=max(0, open_slots))


# --- leases ------------------------------------------------------------------------------------


def _expire_locked(*, assignment_id: int, campaign_id: int, clip_id: int) -> None:
    """Return a live assignment's slots; the caller holds the assignment row lock."""
    _slots_return(assignment_id=assignment_id, campaign_id=campaign_id, clip_id=clip_id)
    Assignment.objects.filter(pk=assignment_id).update(status=AssignmentStatus.EXPIRED)


def _slots_return(*, assignment_id: int, campaign_id: int, clip_id: int) -> None:
    candidate_ids = list(
        AssignmentItem.objects.filter(assignment_id=assignment_id).values_list(
            "campaign_candidate_id", flat=True
        )
    )
    _slots_release(campaign_id=campaign_id, clip_id=clip_id, candidate_ids=candidate_ids)


def _slots_release(*, campaign_id: int, clip_id: int, candidate_ids: list[int]) -> int:
    if not candidate_ids:
        return 0
    # The clip row first (lock order), then the candidates, then the clip counter by what was
    # really released.
    campaign_clip_id = (
        CampaignClip.objects.select_for_update()
        .filter(campaign_id=campaign_id, clip_id=clip_id)
        .values_list("id", flat=True)
        .first()
    )
    released = CampaignCandidate.objects.filter(id__in=candidate_ids, slots_taken__gt=0).update(
        slots_taken=F("slots_taken") - 1
    )
    if campaign_clip_id is not None and released:
        CampaignClip.objects.filter(pk=campaign_clip_id).update(
            open_slots=F("open_slots") + released
        )
    return released


def participation_leases_release(*, participation_ids: Iterable[int]) -> int:
    """End the live leases of these participations now and return their slots (a worker was
    excluded: the clip they hold is refilled at once instead of when the lease runs out). Call
    inside the caller's transaction with the participation rows locked (lock order
    Participation → Assignment → CampaignClip → CampaignCandidate); returns how many leases were
    ended. The leases become `expired`; a late submit of one is refused like any expired lease
    whose slots were taken meanwhile."""
    leases = list(
        Assignment.objects.select_for_update()
        .filter(participation_id__in=list(participation_ids), status=AssignmentStatus.LIVE)
        .order_by("clip_id", "id")
        .values_list("id", "campaign_id", "clip_id")
    )
    for assignment_id, campaign_id, clip_id in leases:
        _expire_locked(assignment_id=assignment_id, campaign_id=campaign_id, clip_id=clip_id)
    return len(leases)


def assignment_expire(*, assignment_id: int, now: datetime | None = None) -> bool:
    """Expire one live assignment whose lease ran out and return its slots; False if it is not
    (any more) a live expired lease, or another transaction is handling it right now."""
    now = now or timezone.now()
    with transaction.atomic():
        row = (
            Assignment.objects.select_for_update(skip_locked=True)
            .filter(pk=assignment_id, status=AssignmentStatus.LIVE, expires_at__lte=now)
            .values_list("campaign_id", "clip_id")
            .first()
        )
        if row is None:
            return False
        campaign_id, clip_id = row
        _expire_locked(assignment_id=assignment_id, campaign_id=campaign_id, clip_id=clip_id)
    return True


def participation_leases_return(*, participation: Participation) -> int:
    """End every live lease of `participation` now and return its slots (erasure: the person is
    leaving); returns how many leases ended. Locks as the expiry does, one assignment at a time."""
    ended = 0
    live = Assignment.objects.filter(participation=participation, status=AssignmentStatus.LIVE)
    for assignment_id in live.values_list("pk", flat=True):
        with transaction.atomic():
            row = (
                Assignment.objects.select_for_update()
                .filter(pk=assignment_id, status=AssignmentStatus.LIVE)
                .values_list("campaign_id", "clip_id")
                .first()
            )
            if row is not None:
                _expire_locked(assignment_id=assignment_id, campaign_id=row[0], clip_id=row[1])
                ended += 1
    return ended


def assignments_expire(*, now: datetime | None = None, limit: int = 50_000) -> int:
    """Expire every live assignment whose lease ran out (one short transaction each); returns how
    many were expired. Called by the `annotation.expire_leases` beat task."""
    now = now or timezone.now()
    expired_ids = list(
        Assignment.objects.filter(status=AssignmentStatus.LIVE, expires_at__lte=now)
        .order_by("expires_at", "id")
        .values_list("id", flat=True)[:limit]
    )
    return sum(assignment_expire(assignment_id=pk, now=now) for pk in expired_ids)


def _free_slots_lock(
    *, campaign_id: int, clip_id: int, candidate_ids: list[int]
) -> tuple[int | None, list[int]]:
    """Lock the campaign clip's row, then (the engine's lock order) those of `candidate_ids` that
    still have a free slot; returns the clip row's id (None when the clip left the campaign) and
    the free candidates' ids."""
    campaign_clip_id = (
        CampaignClip.objects.select_for_update()
        .filter(campaign_id=campaign_id, clip_id=clip_id)
        .values_list("id", flat=True)
        .first()
    )
    free = list(
        CampaignCandidate.objects.select_for_update()
        .filter(id__in=candidate_ids, slots_taken__lt=F("quota"))
        .values_list("id", flat=True)
    )
    return campaign_clip_id, free


def _by_clip(campaign_candidate_ids: Iterable[int]) -> dict[tuple[int, int], list[int]]:
    """Campaign candidate ids grouped by (campaign, clip): the unit the slot counters are locked in."""
    by_clip: dict[tuple[int, int], list[int]] = {}
    for pk, campaign_id, clip_id in CampaignCandidate.objects.filter(
        id__in=list(campaign_candidate_ids)
    ).values_list("id", "campaign_id", "clip_id"):
        by_clip.setdefault((campaign_id, clip_id), []).append(pk)
    return by_clip


def assignment_slots_retake(*, assignment: Assignment) -> bool:
    """For a late submit of an expired assignment (caller holds its row lock inside a
    transaction): take one slot on each of its candidates again, all or nothing. False when any
    of them has been filled by other workers meanwhile."""
    candidate_ids = list(
        AssignmentItem.objects.filter(assignment_id=assignment.pk).values_list(
            "campaign_candidate_id", flat=True
        )
    )
    campaign_clip_id, free = _free_slots_lock(
        campaign_id=assignment.campaign_id, clip_id=assignment.clip_id, candidate_ids=candidate_ids
    )
    if campaign_clip_id is None or len(free) != len(candidate_ids):
        return False
    CampaignCandidate.objects.filter(id__in=candidate_ids).update(slots_taken=F("slots_taken") + 1)
    CampaignClip.objects.filter(pk=campaign_clip_id).update(
        open_slots=F("open_slots") - len(candidate_ids)
    )
    return True


def campaign_candidate_slots_release(*, campaign_candidate_ids: Iterable[int]) -> int:
    """Give back one slot on each of these campaign candidates (e.g. QC excluded a kept judgment
    of each), keeping `CampaignClip.open_slots` in step and the engine's lock order. Call inside
    the caller's transaction or alone; returns how many slots were released."""
    by_clip = _by_clip(campaign_candidate_ids)
    released = 0
    with transaction.atomic():
        for (campaign_id, clip_id), ids in sorted(by_clip.items()):
            released += _slots_release(campaign_id=campaign_id, clip_id=clip_id, candidate_ids=ids)
    return released


def campaign_candidate_slots_take(*, campaign_candidate_ids: Iterable[int]) -> list[int]:
    """Take one slot on each of these campaign candidates where one is free (e.g. a curator
    re-includes an excluded judgment); returns the ids that got one. Same lock order."""
    by_clip = _by_clip(campaign_candidate_ids)
    taken: list[int] = []
    with transaction.atomic():
        for (campaign_id, clip_id), ids in sorted(by_clip.items()):
            campaign_clip_id, free = _free_slots_lock(
                campaign_id=campaign_id, clip_id=clip_id, candidate_ids=ids
            )
            if not free:
                continue
            CampaignCandidate.objects.filter(id__in=free).update(slots_taken=F("slots_taken") + 1)
            if campaign_clip_id is not None:
                CampaignClip.objects.filter(pk=campaign_clip_id).update(
                    open_slots=F("open_slots") - len(free)
                )
            taken.extend(free)
    return taken
