"""Excluding and re-including workers: slots, quota refills, curator overrides, and the recompute
that follows a curator's decision."""

from __future__ import annotations

import pytest

from annotation.models import (
    AuditEntry,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    ParticipationStatus,
    ReviewAction,
    ReviewItem,
    WorkerExclusion,
    WorkerQCStats,
)
from annotation.quality.aggregation import aggregation_recompute
from annotation.quality.exclusions import (
    EXCLUDED_BY_QUOTA_REFILLED,
    worker_exclude,
    worker_include,
)
from annotation.quality.run import qc_campaign_full
from tests.annotation.quality.factories import (
    quality_crowd_campaign,
    quality_judge,
    quality_slots_consistent,
    quality_worker,
)

pytestmark = pytest.mark.django_db

KEYS = ("descriptiveness", "relevance", "fluency")


def _counters(campaign) -> tuple[dict[int, int], int]:
    slots = dict(
        CampaignCandidate.objects.filter(campaign=campaign).values_list("id", "slots_taken")
    )
    return slots, sum(
        CampaignClip.objects.filter(campaign=campaign).values_list("open_slots", flat=True)
    )


def test_curator_exclusion_and_inclusion_are_reversible_and_audited(curator):
    campaign = quality_crowd_campaign(clips=2, candidates_per_clip=2, quota=2)
    items = list(campaign.items.order_by("id"))
    worker = quality_worker(campaign, "someone")
    for item in items:
        quality_judge(worker, item, dict.fromkeys(KEYS, 4))
    before_slots, before_open = _counters(campaign)

    outcome = worker_exclude(participation=worker, actor=curator, reason="copied answers")

    assert outcome.judgments_excluded == 4
    worker.refresh_from_db()
    assert worker.status == ParticipationStatus.EXCLUDED
    assert not worker.may_receive_work
    assert set(Judgment.objects.values_list("excluded_by", flat=True)) == {"curator"}
    assert Judgment.objects.first().exclusion_reason == "Excluded by a curator: copied answers"
    slots, open_slots = _counters(campaign)
    assert all(slots[key] == before_slots[key] - 1 for key in slots)
    assert open_slots == before_open + 4
    quality_slots_consistent(campaign)

    inclusion = worker_include(participation=worker, actor=curator, note="checked: fine")

    assert (inclusion.judgments_included, inclusion.judgments_kept_out) == (4, 0)
    worker.refresh_from_db()
    assert worker.status == ParticipationStatus.ACTIVE
    assert not Judgment.objects.filter(is_excluded=True).exists()
    assert _counters(campaign) == (before_slots, before_open)
    exclusion = WorkerExclusion.objects.get()
    assert exclusion.reversed_by == curator and exclusion.reversed_at is not None
    actions = list(
        AuditEntry.objects.order_by("id").values_list("action", "actor", "before", "after")
    )
    assert actions[0][:3] == (ReviewAction.EXCLUDE_WORKER, curator.pk, {"status": "active"})
    assert actions[1][0] == ReviewAction.INCLUDE_WORKER
    assert actions[1][3]["judgments_included"] == 4


def test_curator_exclusion_and_inclusion_recompute_the_candidates_they_change(curator):
    """One service per action: the aggregates and the review queue follow without a separate
    recompute by the caller."""
    campaign = quality_crowd_campaign(clips=1, candidates_per_clip=2, quota=3)
    first, second = campaign.items.order_by("id")
    steady = quality_worker(campaign, "steady")
    outlier = quality_worker(campaign, "outlier")
    quality_judge(steady, first, dict.fromkeys(KEYS, 2))
    quality_judge(steady, second, dict.fromkeys(KEYS, 4))
    quality_judge(outlier, first, dict.fromkeys(KEYS, 5))
    aggregation_recompute(campaign=campaign)
    first.refresh_from_db()
    assert (first.kept_judgments, first.means["relevance"]) == (2, 3.5)
    assert ReviewItem.objects.filter(campaign_candidate=first, status="open").exists()  # range 3

    worker_exclude(participation=outlier, actor=curator, reason="copied answers")

    first.refresh_from_db()
    assert (first.judgments_total, first.kept_judgments) == (2, 1)
    assert first.means == dict.fromkeys(KEYS, 2.0) and first.rating_range == 0
    assert not ReviewItem.objects.filter(campaign_candidate=first).exists()  # left the queue
    second.refresh_from_db()
    assert (second.kept_judgments, second.means["relevance"]) == (1, 4.0)  # not touched

    worker_include(participation=outlier, actor=curator, note="checked: fine")

    first.refresh_from_db()
    assert (first.kept_judgments, first.means["relevance"], first.rating_range) == (2, 3.5, 3)
    assert ReviewItem.objects.filter(campaign_candidate=first, status="open").exists()


def test_reinclusion_keeps_judgments_out_where_other_workers_refilled_the_slots(curator):
    campaign = quality_crowd_campaign(clips=1, candidates_per_clip=2, quota=1)
    first, second = campaign.items.order_by("id")
    excluded = quality_worker(campaign, "excluded")
    quality_judge(excluded, first, dict.fromkeys(KEYS, 4))
    quality_judge(excluded, second, dict.fromkeys(KEYS, 4))
    worker_exclude(participation=excluded, actor=curator)
    # Another worker fills the reopened slot of the first candidate only.
    replacement = quality_worker(campaign, "replacement")
    quality_judge(replacement, first, dict.fromkeys(KEYS, 2))

    outcome = worker_include(participation=excluded, actor=curator)

    assert (outcome.judgments_included, outcome.judgments_kept_out) == (1, 1)
    kept_out = Judgment.objects.get(participation=excluded, campaign_candidate=first)
    assert kept_out.is_excluded and kept_out.excluded_by == EXCLUDED_BY_QUOTA_REFILLED
    assert "filled this candidate's slots" in kept_out.exclusion_reason
    assert not Judgment.objects.get(participation=excluded, campaign_candidate=second).is_excluded
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.slots_taken == first.quota == 1  # never above quota
    assert second.slots_taken == 1
    quality_slots_consistent(campaign)


def test_rules_never_re_exclude_a_worker_a_curator_re_included(curator):
    campaign = quality_crowd_campaign(clips=5, candidates_per_clip=3, quota=2)
    items = list(campaign.items.order_by("id"))
    honest = quality_worker(campaign, "honest")
    flat = quality_worker(campaign, "flat")
    for index, item in enumerate(items):
        quality_judge(
            honest, item, {key: 1 + (index + offset) % 5 for offset, key in enumerate(KEYS)}
        )
        quality_judge(flat, item, dict.fromkeys(KEYS, 3))
    qc_campaign_full(campaign=campaign)
    flat.refresh_from_db()
    assert flat.status == ParticipationStatus.EXCLUDED

    worker_include(participation=flat, actor=curator)
    summary = qc_campaign_full(campaign=campaign)

    flat.refresh_from_db()
    assert flat.status == ParticipationStatus.ACTIVE
    assert summary["excluded"] == []
    flag = WorkerQCStats.objects.get(participation=flat).flags[0]
    assert flag["rule"] == "uniform" and flag["action"] == "flag" and flag["override"] is True
