"""The quality passes between full runs (annotation/quality/incremental.py): after a submission
(late work of an excluded worker included) and the sweep."""

from __future__ import annotations

import pytest
from django.db.models import F

from annotation.models import (
    Assignment,
    AssignmentStatus,
    CampaignCandidate,
    Judgment,
    ParticipationStatus,
    WorkerExclusion,
    WorkerQCStats,
)
from annotation.quality.exclusions import worker_exclude
from annotation.quality.incremental import quality_after_submission, quality_sweep
from tests.annotation.quality.factories import (
    quality_crowd_campaign,
    quality_judge,
    quality_slots_consistent,
    quality_worker,
)

pytestmark = pytest.mark.django_db

KEYS = ("descriptiveness", "relevance", "fluency")


def _submitted_assignment(participation, items, values, *, server_ms=20_000):
    assignment = Assignment.objects.create(
        campaign=participation.campaign,
        participation=participation,
        clip=items[0].clip,
        status=AssignmentStatus.SUBMITTED,
        expires_at=participation.joined_at,
        server_ms=server_ms * len(items),
    )
    judgments = []
    for item in items:
        judgment = quality_judge(participation, item, values, server_ms=server_ms)
        Judgment.objects.filter(pk=judgment.pk).update(assignment=assignment)
        judgments.append(judgment)
    return assignment


def test_after_submission_updates_the_worker_and_the_candidates_and_excludes_late_work(curator):
    campaign = quality_crowd_campaign(clips=3, candidates_per_clip=3, quota=2)
    clip_items = {}
    for item in campaign.items.order_by("id"):
        clip_items.setdefault(item.clip_id, []).append(item)
    groups = list(clip_items.values())
    worker = quality_worker(campaign, "worker")

    assignment = _submitted_assignment(
        worker, groups[0], {"descriptiveness": 2, "relevance": 4, "fluency": 5}
    )
    quality_after_submission(assignment_id=assignment.pk)

    stats = WorkerQCStats.objects.get(participation=worker)
    assert stats.judgments == 3 and stats.median_seconds_per_candidate == 20.0
    item = CampaignCandidate.objects.get(pk=groups[0][0].pk)
    assert item.kept_judgments == 1 and item.means == {
        "descriptiveness": 2.0,
        "relevance": 4.0,
        "fluency": 5.0,
    }
    assert item.overall == pytest.approx(11 / 3)

    # Excluded while a lease was live: what they submit afterwards is excluded too.
    worker_exclude(participation=worker, actor=curator, reason="test")
    late = _submitted_assignment(worker, groups[1], dict.fromkeys(KEYS, 3))
    quality_after_submission(assignment_id=late.pk)

    late_judgments = Judgment.objects.filter(assignment=late)
    assert all(judgment.is_excluded for judgment in late_judgments)
    assert {judgment.excluded_by for judgment in late_judgments} == {"worker_excluded"}
    assert CampaignCandidate.objects.get(pk=groups[1][0].pk).kept_judgments == 0
    assert WorkerExclusion.objects.get().judgments_excluded == 6
    quality_slots_consistent(campaign)


def test_the_sweep_catches_up_on_missed_submissions_and_stale_aggregates():
    campaign = quality_crowd_campaign(clips=2, candidates_per_clip=2, quota=2)
    items = list(campaign.items.order_by("id"))
    worker = quality_worker(campaign, "missed")
    for item in items:
        quality_judge(worker, item, {"descriptiveness": 4, "relevance": 5, "fluency": 3})
    # The broker was down: no after-submission task ran.
    assert not WorkerQCStats.objects.exists()
    assert CampaignCandidate.objects.filter(kept_judgments=0).count() == 4

    quality_sweep()

    assert WorkerQCStats.objects.get(participation=worker).judgments == 4
    worker.refresh_from_db()
    assert worker.status == ParticipationStatus.ACTIVE
    assert list(CampaignCandidate.objects.values_list("kept_judgments", "overall").distinct()) == [
        (1, 4.0)
    ]
    # Counters drifted (someone edited a judgment by hand): the sweep repairs aggregates.
    CampaignCandidate.objects.filter(pk=items[0].pk).update(
        judgments_total=F("judgments_total") + 7
    )
    quality_sweep()
    assert CampaignCandidate.objects.get(pk=items[0].pk).judgments_total == 1
