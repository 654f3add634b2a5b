"""The engine's guarantees under concurrency on PostgreSQL: 36 real threads, each with its own
database connection, claim, submit (sometimes twice), abandon, expire and submit late, while a
sweeper thread expires leases. Afterwards: no candidate over quota, no clip twice to a worker, no
submission lost or stored twice, and every counter equal to what the rows say."""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from annotation.crowd.services.assignment import (
    assignment_claim_next,
    assignments_expire,
)
from annotation.crowd.services.offers import assignment_offer_payload
from annotation.crowd.services.submission import SubmissionRefused, assignment_submit
from annotation.models import (
    Assignment,
    AssignmentItem,
    AssignmentStatus,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    Participation,
)
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign, crowd_join

WORKERS = 36
CLIPS = 30
CANDIDATES_PER_CLIP = 3
QUOTA = 3


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_guarantees_hold_with_36_concurrent_workers():
    campaign = crowd_campaign(
        clips=CLIPS, candidates_per_clip=CANDIDATES_PER_CLIP, judgments_per_candidate=QUOTA
    )
    participations = [crowd_join(campaign, f"worker-{n:02d}")[1] for n in range(WORKERS)]
    start = threading.Barrier(WORKERS + 1)
    lock = threading.Lock()
    stop_sweeper = threading.Event()
    offered_clips: dict[int, list[int]] = defaultdict(list)  # participation -> clips offered new
    accepted: dict[int, dict[int, dict[str, int]]] = {}  # assignment -> candidate -> values
    refused_late: list[int] = []
    replays: list[tuple[dict, dict]] = []
    errors: list[BaseException] = []

    def work(participation: Participation, seed: int) -> None:
        rng = random.Random(seed)
        seen_assignments: set[int] = set()
        try:
            start.wait()
            idle = 0
            while idle < 10:
                offer = assignment_claim_next(participation=participation)
                if offer is None:
                    idle += 1
                    threading.Event().wait(0.05)  # leases may still expire and free slots
                    continue
                idle = 0
                payload = assignment_offer_payload(offer=offer, campaign=campaign)
                if offer.assignment_id not in seen_assignments:
                    seen_assignments.add(offer.assignment_id)
                    with lock:
                        offered_clips[participation.pk].append(offer.clip_id)
                value = rng.randint(1, 5)
                body = {
                    "ratings": all_candidate_ratings(payload, value=value),
                    "client_timing": {"active_ms": rng.randint(1000, 9000)},
                }
                roll = rng.random()
                if roll < 0.15:
                    # Abandon: the lease lapses; this thread (or the sweeper) expires it.
                    Assignment.objects.filter(pk=offer.assignment_id).update(
                        expires_at=timezone.now() - timedelta(seconds=1)
                    )
                    assignments_expire()
                    continue
                if roll < 0.30:
                    # Lapse, then submit late: accepted only if the slots are still free.
                    Assignment.objects.filter(pk=offer.assignment_id).update(
                        expires_at=timezone.now() - timedelta(seconds=1)
                    )
                    if rng.random() < 0.5:
                        assignments_expire()
                try:
                    outcome = assignment_submit(
                        participation=participation, assignment_id=offer.assignment_id, body=body
                    )
                except SubmissionRefused as refused:
                    assert refused.status == 409, refused.message
                    with lock:
                        refused_late.append(offer.assignment_id)
                    continue
                assert outcome.created
                values = {
                    rating["candidate_id"]: {
                        key: rating[key] for key in ("descriptiveness", "relevance", "fluency")
                    }
                    for rating in body["ratings"]
                }
                with lock:
                    accepted[offer.assignment_id] = values
                if rng.random() < 0.2:  # a client retry of the same submission
                    again = assignment_submit(
                        participation=participation, assignment_id=offer.assignment_id, body=body
                    )
                    assert not again.created
                    with lock:
                        replays.append((outcome.result, again.result))
        except BaseException as error:  # surfaced in the main thread
            with lock:
                errors.append(error)
        finally:
            connection.close()

    def sweep() -> None:
        try:
            start.wait()
            while not stop_sweeper.is_set():
                assignments_expire()
                stop_sweeper.wait(0.01)
        except BaseException as error:
            with lock:
                errors.append(error)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=work, args=(participation, index))
        for index, participation in enumerate(participations)
    ]
    sweeper = threading.Thread(target=sweep)
    for thread in [*threads, sweeper]:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    stop_sweeper.set()
    sweeper.join(timeout=30)
    assert not any(thread.is_alive() for thread in [*threads, sweeper])
    assert errors == []

    # Over-quota candidates: 0 (live slots + kept judgments never above quota).
    candidates = CampaignCandidate.objects.filter(campaign=campaign).annotate(
        live=Count("assignment_items", filter=Q(assignment_items__assignment__status="live")),
        kept=Count("judgments", filter=Q(judgments__is_excluded=False), distinct=True),
    )
    over_quota = [c.pk for c in candidates if c.live + c.kept > c.quota]
    assert over_quota == []
    # Counters equal what the rows say.
    assert [c.pk for c in candidates if c.slots_taken != c.live + c.kept] == []
    for campaign_clip in CampaignClip.objects.filter(campaign=campaign):
        expected = sum(
            c.quota - c.slots_taken for c in candidates if c.clip_id == campaign_clip.clip_id
        )
        assert campaign_clip.open_slots == expected
    # The work got done: nothing is live and (almost) every slot holds a kept judgment. A slot
    # freed by the very last abandon may stay open when every remaining worker had that clip.
    assert Assignment.objects.filter(status=AssignmentStatus.LIVE).count() == 0
    filled = sum(c.kept for c in candidates)
    assert filled >= 0.9 * CLIPS * CANDIDATES_PER_CLIP * QUOTA

    # Repeated clips: 0, both as seen by the workers and in the table.
    repeated = {
        participation: [clip for clip, n in Counter(clips).items() if n > 1]
        for participation, clips in offered_clips.items()
    }
    assert {pk: clips for pk, clips in repeated.items() if clips} == {}
    assert (
        Assignment.objects.values("participation", "clip")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
        == 0
    )

    # Lost or duplicated submissions: 0. Each accepted submission is stored exactly, once.
    stored: dict[int, dict[int, dict[str, int]]] = defaultdict(dict)
    for assignment_id, candidate_id, values in Judgment.objects.values_list(
        "assignment_id", "campaign_candidate_id", "values"
    ):
        assert candidate_id not in stored[assignment_id]
        stored[assignment_id][candidate_id] = values
    assert dict(stored) == accepted
    assert set(
        Assignment.objects.filter(status=AssignmentStatus.SUBMITTED).values_list("pk", flat=True)
    ) == set(accepted)
    assert not set(refused_late) & set(accepted)
    assert all(first == again for first, again in replays)
    assert sum(
        Participation.objects.filter(campaign=campaign).values_list(
            "assignments_submitted", flat=True
        )
    ) == len(accepted)
    # Items of submitted assignments are exactly their judgments.
    for assignment_id, values in accepted.items():
        items = set(
            AssignmentItem.objects.filter(assignment_id=assignment_id).values_list(
                "campaign_candidate_id", flat=True
            )
        )
        assert items == set(values)
    # The run exercised what it should have.
    assert len(accepted) >= 0.9 * CLIPS * QUOTA
    assert Assignment.objects.filter(status=AssignmentStatus.EXPIRED).count() > 0
