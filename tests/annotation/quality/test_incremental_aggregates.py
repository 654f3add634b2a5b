"""The after-submission pass brings up to date the aggregates and review state of exactly the
candidates whose judgments changed (annotation/quality/incremental.py), and ends where a full QC
run would: the same aggregates, review items and worker verdicts."""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from annotation.models import (
    CampaignCandidate,
    Judgment,
    Participation,
    ParticipationStatus,
    ReviewItem,
    WorkerQCStats,
)
from annotation.quality import incremental
from annotation.quality.aggregation import AGGREGATE_FIELDS
from annotation.quality.incremental import quality_catch_up, quality_sweep_campaign
from annotation.quality.run import qc_campaign_full
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db

KEYS = ("descriptiveness", "relevance", "fluency")


def _clips(campaign) -> list[list[CampaignCandidate]]:  # type: ignore[no-untyped-def]
    groups: dict[int, list[CampaignCandidate]] = {}
    for item in campaign.items.order_by("id"):
        groups.setdefault(item.clip_id, []).append(item)
    return list(groups.values())


def _submit(participation: Participation, items, rng: random.Random, *, extreme: int = 0):  # type: ignore[no-untyped-def]
    """One submission of a clip by an attentive person (the candidate's true score ± 1), or, with
    `extreme`, that rating everywhere (1 from one worker and 5 from another: review queue)."""
    for item in items:
        truth = 1 + item.pk % 5
        values = {key: extreme or min(5, max(1, truth + rng.choice((-1, 0, 1)))) for key in KEYS}
        quality_judge(participation, item, values, server_ms=rng.randint(15_000, 30_000))
    Participation.objects.filter(pk=participation.pk).update(
        assignments_submitted=F("assignments_submitted") + 1,
        last_seen_at=timezone.now(),
    )


def _state(campaign) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Aggregates of every candidate, the review queue and the workers' verdicts."""
    return {
        "candidates": {
            row["id"]: row
            for row in CampaignCandidate.objects.filter(campaign=campaign).values(
                "id", *AGGREGATE_FIELDS
            )
        },
        "review": sorted(
            ReviewItem.objects.filter(campaign=campaign).values_list(
                "campaign_candidate_id", "status", "rating_range", "priority"
            )
        ),
        "workers": sorted(
            Participation.objects.filter(campaign=campaign).values_list("id", "status")
        ),
        "kept": sorted(Judgment.objects.filter(campaign=campaign).values_list("id", "is_excluded")),
    }


def _full_run_state(campaign) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """What a full QC run computes from the same judgments, rolled back afterwards."""
    with transaction.atomic():
        qc_campaign_full(campaign=campaign)
        state = _state(campaign)
        transaction.set_rollback(True)
    return state


def _row_versions(campaign) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """Each candidate row's physical version: an UPDATE, even one in place, gives a new ctid."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, ctid::text FROM {CampaignCandidate._meta.db_table} WHERE campaign_id = %s",
            [campaign.pk],
        )
        return dict(cursor.fetchall())


@pytest.fixture
def aggregated(monkeypatch):  # type: ignore[no-untyped-def]
    """The candidate ids each pass hands to aggregation (a recompute by ids)."""
    calls: list[set[int]] = []
    recompute = incremental.aggregation_recompute

    def spied_recompute(*, campaign, candidate_ids, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(set(candidate_ids))
        return recompute(campaign=campaign, candidate_ids=candidate_ids, **kwargs)

    monkeypatch.setattr(incremental, "aggregation_recompute", spied_recompute)
    return calls


def test_after_every_pass_the_aggregates_equal_those_of_a_full_run():
    campaign = quality_crowd_campaign(clips=8, candidates_per_clip=3, quota=3)
    clips = _clips(campaign)
    rng = random.Random(17)
    workers = [quality_worker(campaign, f"person-{index}") for index in range(4)]
    passes = 0
    for round_number in range(6):
        for index, worker in enumerate(workers):
            if (round_number + index) % 3 == 2:
                continue  # not everybody submits before every pass
            clip = clips[(round_number * 2 + index) % (len(clips) - 1)]
            if Judgment.objects.filter(participation=worker, campaign_candidate=clip[0]).exists():
                continue
            _submit(worker, clip, rng)
        if round_number in (1, 3):  # the last clip: 1 from one worker, 5 from another
            _submit(workers[round_number // 2], clips[-1], rng, extreme=round_number // 2 * 4 + 1)
        quality_catch_up(campaign_id=campaign.pk)
        passes += 1
        after_pass = _state(campaign)
        assert after_pass == _full_run_state(campaign), f"pass {passes}"
    assert ReviewItem.objects.filter(campaign=campaign).exists()  # the queue was exercised
    assert all(status == ParticipationStatus.ACTIVE for _, status in after_pass["workers"])


def test_a_pass_writes_only_the_candidates_whose_judgments_changed(aggregated):
    campaign = quality_crowd_campaign(clips=4, candidates_per_clip=3, quota=3)
    clips = _clips(campaign)
    rng = random.Random(5)
    ann, bob = quality_worker(campaign, "ann"), quality_worker(campaign, "bob")
    _submit(ann, clips[0], rng)
    _submit(ann, clips[1], rng, extreme=1)
    _submit(bob, clips[1], rng, extreme=5)
    quality_catch_up(campaign_id=campaign.pk)
    first = {item.pk for item in clips[0] + clips[1]}
    assert aggregated == [first]
    assert ReviewItem.objects.filter(campaign=campaign).exists()
    versions, review = _row_versions(campaign), _state(campaign)["review"]

    # Ann (who rated clips 0 and 1 before) submits clip 2: only its candidates change.
    _submit(ann, clips[2], rng)
    quality_catch_up(campaign_id=campaign.pk)

    changed = {item.pk for item in clips[2]}
    assert aggregated[1:] == [changed]
    now = _row_versions(campaign)
    assert {pk for pk in now if now[pk] != versions[pk]} == changed
    assert _state(campaign)["review"] == review
    assert _state(campaign) == _full_run_state(campaign)

    # Nothing new: no pass work, no write.
    aggregated.clear()
    assert quality_catch_up(campaign_id=campaign.pk)["workers"] == 0
    assert aggregated == [] and _row_versions(campaign) == now


def test_an_exclusion_recomputes_every_candidate_the_excluded_worker_rated(aggregated):
    """A worker who rates every clip uniformly is excluded by the pass that sees their fourth
    clip (the rule waits for four): the candidates of the first three, aggregated by earlier
    passes and unchanged since, are recomputed without their judgments too."""
    campaign = quality_crowd_campaign(clips=5, candidates_per_clip=3, quota=3)
    clips = _clips(campaign)
    rng = random.Random(11)
    honest = [quality_worker(campaign, f"honest-{index}") for index in range(2)]
    uniform = quality_worker(campaign, "uniform")
    for clip in clips[:3]:
        for worker in honest:
            _submit(worker, clip, rng)
        for item in clip:
            quality_judge(uniform, item, dict.fromkeys(KEYS, 3), server_ms=20_000)
        _submit(uniform, [], rng)
        quality_catch_up(campaign_id=campaign.pk)
    uniform.refresh_from_db()
    assert uniform.status == ParticipationStatus.ACTIVE
    assert CampaignCandidate.objects.get(pk=clips[0][0].pk).kept_judgments == 3
    aggregated.clear()

    for item in clips[3]:
        quality_judge(uniform, item, dict.fromkeys(KEYS, 3), server_ms=20_000)
    _submit(uniform, [], rng)
    quality_catch_up(campaign_id=campaign.pk)

    uniform.refresh_from_db()
    assert uniform.status == ParticipationStatus.EXCLUDED
    rated = {item.pk for clip in clips[:4] for item in clip}
    assert aggregated == [rated]
    assert dict(
        CampaignCandidate.objects.filter(pk__in=rated).values_list("pk", "kept_judgments")
    ) == {pk: (0 if pk in {item.pk for item in clips[3]} else 2) for pk in rated}
    assert _state(campaign) == _full_run_state(campaign)


def test_a_failed_aggregation_leaves_the_workers_stale_and_the_next_pass_catches_up(
    monkeypatch,
):
    campaign = quality_crowd_campaign(clips=3, candidates_per_clip=3, quota=3)
    clips = _clips(campaign)
    rng = random.Random(3)
    ann = quality_worker(campaign, "ann")
    _submit(ann, clips[0], rng)

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("database went away")

    monkeypatch.setattr(incremental, "aggregation_recompute", broken)
    with pytest.raises(RuntimeError):
        quality_catch_up(campaign_id=campaign.pk)
    assert not WorkerQCStats.objects.exists()
    assert CampaignCandidate.objects.filter(campaign=campaign, judgments_total=0).count() == 9

    monkeypatch.undo()
    assert quality_catch_up(campaign_id=campaign.pk)["workers"] == 1
    assert CampaignCandidate.objects.filter(campaign=campaign, judgments_total=1).count() == 3
    assert _state(campaign) == _full_run_state(campaign)


def test_candidates_missed_after_the_statistics_were_stored_are_caught_up():
    """Statistics stored but aggregates not (a pass that aggregated nothing, as the sweep's own
    use of it): the next pass of any worker on those candidates, and the sweep, catch up."""
    campaign = quality_crowd_campaign(clips=3, candidates_per_clip=3, quota=3)
    clips = _clips(campaign)
    rng = random.Random(9)
    ann, bob = quality_worker(campaign, "ann"), quality_worker(campaign, "bob")
    _submit(ann, clips[0], rng)
    _submit(ann, clips[1], rng)
    incremental.workers_quality_update(
        campaign=campaign, participation_ids=[ann.pk], aggregate=False
    )
    assert quality_catch_up(campaign_id=campaign.pk)["workers"] == 0  # Ann is up to date
    assert CampaignCandidate.objects.filter(campaign=campaign, judgments_total=0).count() == 9

    # Bob rates clip 0 too: his pass sees clip 0's counts behind and brings them up to date.
    _submit(bob, clips[0], rng)
    quality_catch_up(campaign_id=campaign.pk)
    assert set(
        CampaignCandidate.objects.filter(campaign=campaign, judgments_total=2).values_list(
            "pk", flat=True
        )
    ) == {item.pk for item in clips[0]}
    # Clip 1 only Ann rated: the sweep finds its stored counts behind the judgments.
    assert CampaignCandidate.objects.filter(pk__in=[i.pk for i in clips[1]], judgments_total=0)
    assert quality_sweep_campaign(campaign=campaign)["candidates"] == 3
    assert _state(campaign) == _full_run_state(campaign)


def test_a_judgment_excluded_without_aggregation_is_caught_by_the_sweep():
    """The kept count differs while the total does not (an exclusion whose own aggregation
    failed): a later pass of another worker who rated that candidate reads its stored sums and
    leaves it (it sums only the candidates of its workers' new judgments); the sweep, which
    compares every candidate's stored counts with its judgments, brings it up to date."""
    campaign = quality_crowd_campaign(clips=3, candidates_per_clip=3, quota=3)
    clips = _clips(campaign)
    rng = random.Random(21)
    ann, bob = quality_worker(campaign, "ann"), quality_worker(campaign, "bob")
    _submit(ann, clips[0], rng)
    _submit(bob, clips[0], rng)
    quality_catch_up(campaign_id=campaign.pk)
    Judgment.objects.filter(participation=ann, campaign_candidate=clips[0][0]).update(
        is_excluded=True
    )

    _submit(bob, clips[1], rng)
    quality_catch_up(campaign_id=campaign.pk)
    item = CampaignCandidate.objects.get(pk=clips[0][0].pk)
    assert (item.judgments_total, item.kept_judgments) == (2, 2)

    assert quality_sweep_campaign(campaign=campaign)["candidates"] == 1
    item = CampaignCandidate.objects.get(pk=clips[0][0].pk)
    assert (item.judgments_total, item.kept_judgments) == (2, 1)
    assert _state(campaign) == _full_run_state(campaign)
