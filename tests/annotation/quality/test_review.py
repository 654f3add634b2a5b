"""The expert review queue: detection, claims (two curators never hold one item), resolutions,
the audit trail and undo."""

from __future__ import annotations

import json
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from annotation.models import (
    AuditEntry,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    ReviewAction,
    ReviewItem,
    ReviewState,
    ReviewStatus,
)
from annotation.quality.exclusions import worker_exclude
from annotation.quality.review import (
    JudgmentExclusionRequest,
    ReviewError,
    audit_undo,
    review_claim,
    review_claim_next,
    review_release,
    review_resolve,
)
from annotation.quality.run import qc_campaign_full
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

KEYS = ("descriptiveness", "relevance", "fluency")


def _disputed_campaign(slug: str = "review"):
    """Candidate 0 spans 4 points, candidate 1 spans 3 (fluency only), candidate 2 spans 2."""
    campaign = quality_crowd_campaign(slug=slug, clips=1, candidates_per_clip=3, quota=3)
    items = list(campaign.items.order_by("id"))
    ratings = {
        0: [(1, 2, 3), (5, 2, 3), (3, 2, 3)],
        1: [(3, 3, 1), (3, 3, 4), (3, 3, 2)],
        2: [(2, 2, 2), (4, 3, 3), (3, 3, 3)],
    }
    workers = [quality_worker(campaign, f"{slug}-w{index}") for index in range(3)]
    for index, item in enumerate(items):
        for worker, values in zip(workers, ratings[index], strict=True):
            quality_judge(worker, item, dict(zip(KEYS, values, strict=True)))
    return campaign, items, workers


def _queue(slug: str) -> dict:
    out = StringIO()
    call_command("review_queue", slug, "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.django_db
def test_candidates_spanning_the_threshold_enter_the_queue_worst_first():
    campaign, items, _ = _disputed_campaign()

    summary = qc_campaign_full(campaign=campaign)

    assert summary["review_items"] == 2
    assert _queue("review") == {
        "open": 2,
        "resolved": 0,
        "items": [
            {"candidate": items[0].pk, "range": 4},
            {"candidate": items[1].pk, "range": 3},
        ],
    }
    assert list(
        CampaignCandidate.objects.order_by("id").values_list("review_state", flat=True)
    ) == [
        ReviewState.OPEN,
        ReviewState.OPEN,
        ReviewState.NONE,
    ]
    # A stricter threshold empties what no longer qualifies (open items only).
    campaign.review_range_threshold = 4
    campaign.save()
    qc_campaign_full(campaign=campaign)
    assert [row["candidate"] for row in _queue("review")["items"]] == [items[0].pk]


@pytest.mark.django_db
def test_an_exclusion_that_narrows_the_range_takes_the_item_out_of_the_queue(curator):
    campaign, items, workers = _disputed_campaign()
    qc_campaign_full(campaign=campaign)
    assert ReviewItem.objects.filter(campaign_candidate=items[0]).exists()

    worker_exclude(participation=workers[1], actor=curator, reason="the 5 and the 4 were wrong")
    qc_campaign_full(campaign=campaign)

    assert not ReviewItem.objects.filter(campaign_candidate=items[0]).exists()
    assert _queue("review")["open"] == 0


@pytest.mark.django_db
def test_a_claimed_item_cannot_be_claimed_or_resolved_by_another_curator(curator, second_curator):
    campaign, items, _ = _disputed_campaign()
    qc_campaign_full(campaign=campaign)
    item = ReviewItem.objects.get(campaign_candidate=items[0])

    assert review_claim(item=item, user=curator) is True
    assert review_claim(item=item, user=second_curator) is False
    assert review_claim(item=item, user=curator) is True  # idempotent for the holder
    with pytest.raises(ReviewError):
        review_resolve(item=item, user=second_curator, ratings={"relevance": 4})
    item.refresh_from_db()
    assert item.claimed_by == curator and item.status == ReviewStatus.CLAIMED
    assert not AuditEntry.objects.filter(action=ReviewAction.SET_RATINGS).exists()

    # claim-next gives the second curator the other item, never the held one.
    other = review_claim_next(campaign=campaign, user=second_curator)
    assert other.campaign_candidate_id == items[1].pk

    assert review_release(item=item, user=second_curator) is False
    assert review_release(item=item, user=curator) is True
    item.refresh_from_db()
    assert item.status == ReviewStatus.OPEN and item.claimed_by is None


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_never_give_one_item_to_two_curators(curator, second_curator):
    """Sixteen threads (two curators) race for the queue on PostgreSQL."""
    campaign = quality_crowd_campaign(slug="race", clips=4, candidates_per_clip=3, quota=2)
    items = list(campaign.items.order_by("id"))
    first, second = quality_worker(campaign, "r1"), quality_worker(campaign, "r2")
    for index, item in enumerate(items):
        low = 1 + index % 2
        quality_judge(first, item, {"descriptiveness": low, "relevance": low, "fluency": 2})
        quality_judge(
            second, item, {"descriptiveness": 5, "relevance": 5, "fluency": 4 + index % 2}
        )
    qc_campaign_full(campaign=campaign)
    assert ReviewItem.objects.count() == 12
    claimed: list[tuple[int, int]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def race(user) -> None:
        try:
            barrier.wait()
            for _ in range(3):
                item = (
                    ReviewItem.objects.filter(campaign=campaign, status="open")
                    .order_by("id")
                    .first()
                )
                if item is not None and review_claim(item=item, user=user):
                    with lock:
                        claimed.append((item.pk, user.pk))
                next_item = review_claim_next(campaign=campaign, user=user)
                if next_item is not None:
                    with lock:
                        claimed.append((next_item.pk, user.pk))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=race, args=(curator if index % 2 else second_curator,))
        for index in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    holders: dict[int, set[int]] = {}
    for item_id, user_id in claimed:
        holders.setdefault(item_id, set()).add(user_id)
    assert all(len(users) == 1 for users in holders.values())
    for item in ReviewItem.objects.filter(status=ReviewStatus.CLAIMED):
        assert holders[item.pk] == {item.claimed_by_id}
    # Each curator holds exactly one item: claim-next hands back what one already holds, and a
    # claim of a fresh item adds one more only through review_claim on an open item.
    assert ReviewItem.objects.filter(status=ReviewStatus.CLAIMED).count() == len(holders)


@pytest.mark.django_db
def test_resolving_sets_ratings_excludes_a_judgment_and_drops_with_an_audit_trail(curator):
    campaign, items, workers = _disputed_campaign()
    qc_campaign_full(campaign=campaign)
    item = ReviewItem.objects.get(campaign_candidate=items[0])
    outlier = Judgment.objects.get(campaign_candidate=items[0], participation=workers[1])
    open_before = CampaignClip.objects.get(campaign=campaign).open_slots

    review_resolve(
        item=item,
        user=curator,
        ratings={"descriptiveness": 2},
        exclude=[JudgmentExclusionRequest(judgment_id=outlier.pk, reason="described another clip")],
        note="checked the video",
    )

    item.refresh_from_db()
    assert item.status == ReviewStatus.RESOLVED and item.resolved_by == curator
    candidate = CampaignCandidate.objects.get(pk=items[0].pk)
    assert candidate.means == {"descriptiveness": 2.0, "relevance": 2.0, "fluency": 3.0}
    assert candidate.overall == pytest.approx(7 / 3)
    assert candidate.kept_judgments == 2 and candidate.is_finalised is True  # resolved
    assert candidate.review_state == ReviewState.RESOLVED
    outlier.refresh_from_db()
    assert outlier.is_excluded and outlier.excluded_by == "review"
    assert outlier.exclusion_reason == "described another clip"
    assert CampaignClip.objects.get(campaign=campaign).open_slots == open_before + 1
    entries = list(AuditEntry.objects.filter(review_item=item).order_by("id"))
    assert [entry.action for entry in entries] == [
        ReviewAction.CLAIM,
        ReviewAction.EXCLUDE_JUDGMENT,
        ReviewAction.SET_RATINGS,
    ]
    assert all(entry.actor == curator for entry in entries)
    assert entries[1].before == {"is_excluded": False, "excluded_by": "", "exclusion_reason": ""}
    assert entries[1].after["is_excluded"] is True
    assert entries[2].before["resolution"] == {}
    assert entries[2].after == {"resolution": {"values": {"descriptiveness": 2.0}}}
    assert entries[2].note == "checked the video"
    assert _queue("review") == {
        "open": 1,
        "resolved": 1,
        "items": [{"candidate": items[1].pk, "range": 3}],
    }

    # Undo the ratings: back to the mean of the kept judgments; the item stays resolved
    # because the exclusion still stands.
    audit_undo(entry=entries[2], user=curator)
    candidate.refresh_from_db()
    assert candidate.means["descriptiveness"] == 2.0  # mean of the kept 1 and 3
    assert candidate.resolution == {}
    item.refresh_from_db()
    assert item.status == ReviewStatus.RESOLVED
    with pytest.raises(ReviewError):
        audit_undo(entry=entries[2], user=curator)

    # Undo the exclusion too: the judgment is back, and the item returns to the queue.
    audit_undo(entry=entries[1], user=curator)
    outlier.refresh_from_db()
    assert not outlier.is_excluded
    item.refresh_from_db()
    assert item.status == ReviewStatus.OPEN and item.resolved_by is None
    candidate.refresh_from_db()
    assert candidate.kept_judgments == 3 and candidate.means["descriptiveness"] == 3.0
    assert candidate.review_state == ReviewState.OPEN
    undo_entries = AuditEntry.objects.filter(action=ReviewAction.UNDO).order_by("id")
    assert [entry.undoes_id for entry in undo_entries] == [entries[2].pk, entries[1].pk]


@pytest.mark.django_db
def test_dropping_keeps_a_candidate_out_of_releases_until_undone(curator):
    campaign, items, _ = _disputed_campaign()
    qc_campaign_full(campaign=campaign)
    item = ReviewItem.objects.get(campaign_candidate=items[1])

    review_resolve(item=item, user=curator, drop=True)

    candidate = CampaignCandidate.objects.get(pk=items[1].pk)
    assert candidate.dropped is True and candidate.is_finalised is False
    drop = AuditEntry.objects.get(action=ReviewAction.DROP)
    assert (drop.before, drop.after) == ({"dropped": False}, {"dropped": True})

    audit_undo(entry=drop, user=curator)
    candidate.refresh_from_db()
    assert candidate.dropped is False and candidate.is_finalised is True


@pytest.mark.django_db
def test_invalid_resolutions_are_refused_and_change_nothing(curator):
    campaign, items, _workers = _disputed_campaign()
    qc_campaign_full(campaign=campaign)
    item = ReviewItem.objects.get(campaign_candidate=items[0])
    other_candidate_judgment = Judgment.objects.filter(campaign_candidate=items[2]).first()

    for arguments in (
        {"ratings": {"relevance": 6}},
        {"ratings": {"colour": 3}},
        {},
        {
            "exclude": [
                JudgmentExclusionRequest(judgment_id=other_candidate_judgment.pk, reason="x")
            ]
        },
        {
            "exclude": [
                JudgmentExclusionRequest(judgment_id=other_candidate_judgment.pk, reason=" ")
            ]
        },
    ):
        with pytest.raises(ReviewError):
            review_resolve(item=item, user=curator, **arguments)

    assert not Judgment.objects.filter(is_excluded=True).exists()
    assert CampaignCandidate.objects.get(pk=items[0].pk).resolution == {}
    assert not AuditEntry.objects.exclude(action=ReviewAction.CLAIM).exists()


@pytest.mark.django_db
def test_undoing_a_worker_exclusion_and_its_undo_bring_the_aggregates_along(curator):
    campaign = quality_crowd_campaign(slug="undo-worker", clips=1, candidates_per_clip=1, quota=3)
    item = campaign.items.get()
    steady = quality_worker(campaign, "steady")
    outlier = quality_worker(campaign, "outlier")
    quality_judge(steady, item, dict.fromkeys(KEYS, 2))
    quality_judge(outlier, item, dict.fromkeys(KEYS, 5))
    worker_exclude(participation=outlier, actor=curator, reason="copied answers")
    item.refresh_from_db()
    assert (item.kept_judgments, item.overall) == (1, 2.0)
    exclusion = AuditEntry.objects.get(action=ReviewAction.EXCLUDE_WORKER)

    undo = audit_undo(entry=exclusion, user=curator, note="was fine")

    assert undo.after == {"status": "active", "judgments_included": 1, "judgments_kept_out": 0}
    outlier.refresh_from_db()
    item.refresh_from_db()
    assert outlier.status == "active"
    assert (item.kept_judgments, item.overall, item.review_state) == (2, 3.5, ReviewState.OPEN)
    inclusion = AuditEntry.objects.get(action=ReviewAction.INCLUDE_WORKER)

    audit_undo(entry=inclusion, user=curator, note="was not fine after all")

    outlier.refresh_from_db()
    item.refresh_from_db()
    assert outlier.status == "excluded"
    assert (item.kept_judgments, item.overall, item.review_state) == (1, 2.0, ReviewState.NONE)
    assert not ReviewItem.objects.filter(campaign_candidate=item).exists()
