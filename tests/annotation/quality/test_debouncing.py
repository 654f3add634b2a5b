"""After-submission quality work, at most one pass per campaign per window, which brings every
worker who submitted meanwhile up to date; cache and broker failures never reach the web."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db.models import F
from django.utils import timezone

from annotation.crowd import debouncing
from annotation.models import CampaignCandidate, Judgment, Participation, WorkerQCStats
from annotation.quality.exclusions import worker_exclude
from annotation.quality.incremental import quality_catch_up, quality_catch_up_active
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

KEYS = ("descriptiveness", "relevance", "fluency")


def _submits(participation: Participation, items, values, *, ago: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    """Judgments of one submission, the worker last seen `ago` seconds ago."""
    for item in items:
        quality_judge(participation, item, values)
    Participation.objects.filter(pk=participation.pk).update(
        assignments_submitted=F("assignments_submitted") + 1,
        last_seen_at=timezone.now() - timedelta(seconds=ago),
    )


@pytest.fixture
def published(monkeypatch):  # type: ignore[no-untyped-def]
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(
        "annotation.tasks.quality_catch_up.apply_async",
        lambda args, kwargs, retry: calls.append(args),
    )
    cache.clear()
    return calls


def test_one_pass_per_campaign_and_window(published):
    assert debouncing.catch_up_publish(campaign_id=7, window=1.0)
    assert not debouncing.catch_up_publish(campaign_id=7, window=1.0)
    assert debouncing.catch_up_publish(campaign_id=8, window=1.0)
    assert published == [(7,), (8,)]

    time.sleep(1.1)  # the mark expires with the window: the next submission publishes again
    assert debouncing.catch_up_publish(campaign_id=7, window=1.0)
    assert published == [(7,), (8,), (7,)]


def test_a_broker_failure_clears_the_mark_so_the_next_submission_tries_again(monkeypatch):
    cache.clear()

    def broker_down(**_kwargs):  # type: ignore[no-untyped-def]
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr("annotation.tasks.quality_catch_up.apply_async", broker_down)
    assert not debouncing.catch_up_publish(campaign_id=9, window=2.0)
    assert cache.get(debouncing.pending_key(9)) is None
    # Within the broker-down backoff the next submission does not even try (the sweep catches up).
    assert not debouncing.catch_up_publish(campaign_id=9, window=2.0)
    assert cache.get(debouncing.pending_key(9)) is None


def test_a_cache_failure_still_publishes(published, monkeypatch):
    def cache_down(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise ConnectionError("cache down")

    monkeypatch.setattr(debouncing.cache, "add", cache_down)
    monkeypatch.setattr(debouncing.cache, "delete", cache_down)
    assert debouncing.catch_up_publish(campaign_id=10, window=2.0)
    debouncing.pending_clear(10)  # logged, not raised
    assert published == [(10,)]


def test_a_window_of_zero_publishes_one_task_per_submission(
    db, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.LEPUS_QC_DEBOUNCE_SECONDS = 0
    sent = []
    monkeypatch.setattr(
        "annotation.tasks.after_submission.apply_async",
        lambda args, kwargs, retry: sent.append(args),
    )
    with django_capture_on_commit_callbacks(execute=True):
        debouncing.after_submission_schedule(campaign_id=1, assignment_id=41)
        debouncing.after_submission_schedule(campaign_id=1, assignment_id=42)
    assert sent == [(41,), (42,)]


def test_the_pass_updates_every_worker_who_submitted_and_excludes_late_work(curator):
    campaign = quality_crowd_campaign(clips=3, candidates_per_clip=2, quota=3)
    groups: dict[int, list[CampaignCandidate]] = {}
    for item in campaign.items.order_by("id"):
        groups.setdefault(item.clip_id, []).append(item)
    clips = list(groups.values())
    ann = quality_worker(campaign, "ann")
    bob = quality_worker(campaign, "bob")
    idle = quality_worker(campaign, "idle")
    _submits(ann, clips[0], {"descriptiveness": 2, "relevance": 4, "fluency": 5})
    _submits(bob, clips[0], {"descriptiveness": 4, "relevance": 4, "fluency": 3})

    assert quality_catch_up(campaign_id=campaign.pk) == {"workers": 2, "candidates": 0}

    stats = {s.participation_id: s for s in WorkerQCStats.objects.all()}
    assert set(stats) == {ann.pk, bob.pk}  # the worker who never submitted is not touched
    assert stats[ann.pk].judgments == 2 and stats[bob.pk].judgments == 2
    item = CampaignCandidate.objects.get(pk=clips[0][0].pk)
    assert item.kept_judgments == 2
    assert item.means == {"descriptiveness": 3.0, "relevance": 4.0, "fluency": 4.0}
    # Nothing new: the next pass has nobody to update.
    assert quality_catch_up(campaign_id=campaign.pk)["workers"] == 0

    # Excluded while a lease was live: what they store afterwards is excluded by the next pass.
    worker_exclude(participation=bob, actor=curator, reason="test")
    _submits(bob, clips[1], dict.fromkeys(KEYS, 3), ago=0)
    _submits(ann, clips[1], dict.fromkeys(KEYS, 5), ago=0)
    assert quality_catch_up(campaign_id=campaign.pk) == {"workers": 1, "candidates": 2}
    late = Judgment.objects.filter(participation=bob, campaign_candidate__in=clips[1])
    assert late.count() == 2 and all(j.is_excluded for j in late)
    assert CampaignCandidate.objects.get(pk=clips[1][0].pk).kept_judgments == 1
    assert WorkerQCStats.objects.get(participation=ann).judgments == 4
    assert idle.pk not in set(WorkerQCStats.objects.values_list("participation_id", flat=True))


def test_the_beat_pass_covers_every_active_crowd_campaign_with_stale_workers(db):
    busy = quality_crowd_campaign(slug="busy", clips=2, candidates_per_clip=2, quota=3)
    quiet = quality_crowd_campaign(slug="quiet", clips=1, candidates_per_clip=2, quota=3)
    clip_items: dict[int, list[CampaignCandidate]] = {}
    for item in busy.items.order_by("id"):
        clip_items.setdefault(item.clip_id, []).append(item)
    for index, items in enumerate(clip_items.values()):
        _submits(quality_worker(busy, f"w{index}"), items, dict.fromkeys(KEYS, 4))
    quality_worker(quiet, "idle")

    assert quality_catch_up_active() == 2
    assert WorkerQCStats.objects.filter(participation__campaign=busy).count() == 2
    assert not WorkerQCStats.objects.filter(participation__campaign=quiet).exists()
    assert quality_catch_up_active() == 0  # nothing stale any more
