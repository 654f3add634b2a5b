"""Adaptive judgment allocation through the real worker API (issue 28, "Done when"): candidates
whose raters agree stop at the minimum; those whose raters disagree get more, up to the maximum and
never beyond it under 50 concurrent workers; an excluded worker's judgments are refilled; a metric
that disagrees with the crowd opens a slot (through the service and through the Celery task,
sent by name to a real worker, as the metric's scoring job sends it)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count, Q
from rest_framework.test import APIClient

from annotation.crowd.services.allocation import allocation_redecide
from annotation.models import (
    Assignment,
    AssignmentItem,
    AssignmentStatus,
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    StopReason,
)
from annotation.quality.aggregation import aggregation_recompute
from common.tasks import publish_now, task_named
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign, crowd_join
from tests.export.helpers import build, jsonl_records
from tests.support.processes import wait_until

NEXT = "/api/v1/worker/assignments/next"
ADAPTIVE = {"kind": "adaptive", "minimum": 2, "maximum": 5, "disagreement_range": 2}


def _submit_url(assignment_id: int) -> str:
    return f"/api/v1/worker/assignments/{assignment_id}/submit"


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Worker {token}")
    return client


def _rate(client: APIClient, value: int) -> dict[str, Any] | None:
    """One clip through the worker API, every candidate and question rated `value`; the offer's
    body (None when nothing is left for this worker)."""
    offered = client.post(NEXT)
    if offered.status_code == 204:
        return None
    assert offered.status_code == 200, offered.content
    body = offered.json()
    submitted = client.post(
        _submit_url(body["assignment_id"]),
        {"ratings": all_candidate_ratings(body, value=value)},
        format="json",
    )
    assert submitted.status_code == 201, submitted.content
    return body


def _state(campaign: Campaign) -> dict[int, tuple[int, int, str, tuple[str, ...]]]:
    """{campaign candidate: (quota, kept judgments, stop reason, opened by)}."""
    kept = Counter(
        Judgment.objects.filter(campaign=campaign, is_excluded=False).values_list(
            "campaign_candidate_id", flat=True
        )
    )
    return {
        pk: (quota, kept[pk], stop_reason, tuple(opened_by))
        for pk, quota, stop_reason, opened_by in CampaignCandidate.objects.filter(
            campaign=campaign
        ).values_list("id", "quota", "stop_reason", "opened_by")
    }


def _counters_consistent(campaign: Campaign) -> None:
    """Every clip counter equals what its candidates say (quota − slots taken), and every
    candidate's slots equal its live items plus its kept judgments."""
    for campaign_clip in CampaignClip.objects.filter(campaign=campaign):
        candidates = CampaignCandidate.objects.filter(campaign=campaign, clip=campaign_clip.clip)
        assert campaign_clip.open_slots == sum(c.quota - c.slots_taken for c in candidates)
    live = Counter(
        AssignmentItem.objects.filter(
            assignment__campaign=campaign, assignment__status=AssignmentStatus.LIVE
        ).values_list("campaign_candidate_id", flat=True)
    )
    kept = Counter(
        Judgment.objects.filter(campaign=campaign, is_excluded=False).values_list(
            "campaign_candidate_id", flat=True
        )
    )
    for candidate in CampaignCandidate.objects.filter(campaign=campaign):
        assert candidate.slots_taken == live[candidate.pk] + kept[candidate.pk]


@pytest.mark.django_db
def test_a_new_adaptive_campaign_starts_every_candidate_at_the_minimum():
    campaign = crowd_campaign(clips=2, candidates_per_clip=2, allocation=ADAPTIVE)
    assert campaign.allocation == {
        **ADAPTIVE,
        "standard_error_threshold": None,
        "metric_disagreement_threshold": None,
        "review_range_threshold": 3,
    }
    assert set(CampaignCandidate.objects.filter(campaign=campaign).values_list("quota")) == {(2,)}
    assert set(CampaignClip.objects.filter(campaign=campaign).values_list("open_slots")) == {(4,)}


@pytest.mark.django_db
def test_candidates_whose_raters_agree_stop_at_the_minimum():
    campaign = crowd_campaign(clips=1, candidates_per_clip=2, allocation=ADAPTIVE)
    workers = [_client(crowd_join(campaign, f"agree-{n}")[0]) for n in range(3)]
    assert _rate(workers[0], 4) is not None
    assert set(_state(campaign).values()) == {(2, 1, "", ())}
    assert _rate(workers[1], 4) is not None
    assert set(_state(campaign).values()) == {(2, 2, StopReason.SETTLED, ())}
    # Nothing is left for a third worker: the candidates are settled at the minimum.
    assert workers[2].post(NEXT).status_code == 204
    assert CampaignClip.objects.get(campaign=campaign).open_slots == 0
    _counters_consistent(campaign)


@pytest.mark.django_db
def test_a_candidate_reaching_the_review_range_stops_for_review():
    campaign = crowd_campaign(clips=1, candidates_per_clip=1, allocation=ADAPTIVE)
    for n, value in enumerate((1, 5)):
        _rate(_client(crowd_join(campaign, f"split-{n}")[0]), value)
    assert set(_state(campaign).values()) == {(2, 2, StopReason.REVIEW, ())}


@pytest.mark.django_db
def test_a_fixed_campaign_keeps_its_quota_whatever_the_raters_say():
    campaign = crowd_campaign(clips=1, candidates_per_clip=1, judgments_per_candidate=3)
    for n, value in enumerate((1, 5)):
        _rate(_client(crowd_join(campaign, f"fixed-{n}")[0]), value)
    assert set(_state(campaign).values()) == {(3, 2, "", ())}
    assert CampaignClip.objects.get(campaign=campaign).open_slots == 1


def _work_left(campaign: Campaign) -> bool:
    return (
        CampaignClip.objects.filter(campaign=campaign, open_slots__gt=0).exists()
        or Assignment.objects.filter(campaign=campaign, status=AssignmentStatus.LIVE).exists()
    )


WORKERS = 50
AGREEING_CLIPS = 6
DISAGREEING_CLIPS = 6


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_disagreeing_candidates_get_more_up_to_the_maximum_under_50_concurrent_workers():
    campaign = crowd_campaign(
        clips=AGREEING_CLIPS + DISAGREEING_CLIPS, candidates_per_clip=2, allocation=ADAPTIVE
    )
    clip_ids = sorted(
        CampaignClip.objects.filter(campaign=campaign).values_list("clip_id", flat=True)
    )
    disagreeing_clips = set(clip_ids[AGREEING_CLIPS:])
    tokens = [crowd_join(campaign, f"crowd-{n:02d}")[0] for n in range(WORKERS)]
    start = threading.Barrier(WORKERS + 2)  # the workers, the watcher and this thread
    stop_watch = threading.Event()
    lock = threading.Lock()
    errors: list[BaseException] = []
    most_seen: list[int] = [0]

    def work(token: str) -> None:
        client = _client(token)
        try:
            start.wait()
            while True:
                offered = client.post(NEXT)
                if offered.status_code == 204:
                    # Slots open as judgments come in: nothing now may be something soon, until
                    # no slot is open and no lease is out.
                    if not _work_left(campaign):
                        return
                    threading.Event().wait(0.2)  # under the per-worker `next` throttle
                    continue
                assert offered.status_code == 200, offered.content
                body = offered.json()
                assignment = Assignment.objects.get(pk=body["assignment_id"])
                value = 3
                if assignment.clip_id in disagreeing_clips:
                    # The clip's n-th lease rates 2 or 4 by n's parity: its first two raters
                    # disagree (range 2), never enough for review (range 3).
                    rank = Assignment.objects.filter(
                        campaign=campaign, clip_id=assignment.clip_id, id__lt=assignment.pk
                    ).count()
                    value = 2 if rank % 2 == 0 else 4
                submitted = client.post(
                    _submit_url(body["assignment_id"]),
                    {"ratings": all_candidate_ratings(body, value=value)},
                    format="json",
                )
                assert submitted.status_code == 201, submitted.content
        except BaseException as error:  # surfaced in the main thread
            with lock:
                errors.append(error)
        finally:
            connection.close()

    def watch() -> None:
        """Kept + live judgments of any candidate, sampled while the workers run."""
        try:
            start.wait()
            while not stop_watch.is_set():
                peak = (
                    CampaignCandidate.objects.filter(campaign=campaign)
                    .order_by("-slots_taken")
                    .values_list("slots_taken", flat=True)
                    .first()
                )
                with lock:
                    most_seen[0] = max(most_seen[0], peak or 0)
                stop_watch.wait(0.005)
        except BaseException as error:
            with lock:
                errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(token,)) for token in tokens]
    watcher = threading.Thread(target=watch)
    for thread in [*threads, watcher]:
        thread.start()
    start.wait()
    for thread in threads:
        thread.join(timeout=300)
    stop_watch.set()
    watcher.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []

    state = _state(campaign)
    clip_of = dict(CampaignCandidate.objects.filter(campaign=campaign).values_list("id", "clip_id"))
    agreeing = {state[pk] for pk in state if clip_of[pk] not in disagreeing_clips}
    disagreeing = {state[pk] for pk in state if clip_of[pk] in disagreeing_clips}
    assert agreeing == {(2, 2, StopReason.SETTLED, ())}
    assert disagreeing == {(5, 5, StopReason.MAXIMUM, ("range",))}
    # Never beyond the maximum, at any moment sampled; never a clip twice to a worker.
    assert 2 <= most_seen[0] <= 5
    assert Judgment.objects.filter(campaign=campaign).count() == 2 * (
        AGREEING_CLIPS * 2 + DISAGREEING_CLIPS * 5
    )
    assert (
        Assignment.objects.filter(campaign=campaign)
        .values("participation_id", "clip_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
        == 0
    )
    assert not Assignment.objects.filter(campaign=campaign, status=AssignmentStatus.LIVE).exists()
    assert CampaignClip.objects.filter(campaign=campaign, open_slots__gt=0).count() == 0
    _counters_consistent(campaign)


@pytest.mark.django_db
def test_an_excluded_workers_judgments_are_refilled_and_decided_again(curator_client):
    campaign = crowd_campaign(clips=1, candidates_per_clip=2, allocation=ADAPTIVE)
    joined = [crowd_join(campaign, f"refill-{n}") for n in range(3)]
    for token, _participation in joined[:2]:
        _rate(_client(token), 4)
    assert set(_state(campaign).values()) == {(2, 2, StopReason.SETTLED, ())}

    excluded = curator_client.post(
        f"/api/v1/campaigns/{campaign.slug}/quality/workers/{joined[0][1].pk}/exclude",
        {"reason": "robot"},
        content_type="application/json",
    )
    assert excluded.status_code == 200, excluded.content
    # One kept rating each: below the minimum again, so each wants one more.
    assert set(_state(campaign).values()) == {(2, 1, "", ())}
    assert CampaignClip.objects.get(campaign=campaign).open_slots == 2
    _counters_consistent(campaign)

    # A third worker refills them; they settle again on two kept ratings.
    assert _rate(_client(joined[2][0]), 4) is not None
    assert set(_state(campaign).values()) == {(2, 2, StopReason.SETTLED, ())}
    assert Judgment.objects.filter(campaign=campaign, is_excluded=True).count() == 2
    _counters_consistent(campaign)


METRIC = {**ADAPTIVE, "metric_disagreement_threshold": 1.0}


def _settled_campaign(slug: str) -> Campaign:
    """Two candidates, each settled on two agreeing ratings of 4."""
    campaign = crowd_campaign(clips=1, candidates_per_clip=2, slug=slug, allocation=METRIC)
    for n in range(2):
        _rate(_client(crowd_join(campaign, f"{slug}-{n}")[0]), 4)
    assert set(_state(campaign).values()) == {(2, 2, StopReason.SETTLED, ())}
    return campaign


@pytest.mark.django_db
def test_a_metric_that_disagrees_with_the_crowd_opens_a_slot():
    campaign = _settled_campaign("metric-service")
    near, far = CampaignCandidate.objects.filter(campaign=campaign).order_by("id")
    # Within the threshold plus the metric's uncertainty: |4 − 3.2| = 0.8 ≤ 1.0 + 0.1.
    CampaignCandidate.objects.filter(pk=near.pk).update(metric_score=3.2, metric_uncertainty=0.1)
    # Beyond it: |4 − 1.5| = 2.5 > 1.0 + 0.3.
    CampaignCandidate.objects.filter(pk=far.pk).update(metric_score=1.5, metric_uncertainty=0.3)

    assert (
        allocation_redecide(campaign_id=campaign.pk, campaign_candidate_ids=[near.pk, far.pk]) == 1
    )
    state = _state(campaign)
    assert state[near.pk] == (2, 2, StopReason.SETTLED, ())
    assert state[far.pk] == (3, 2, "", ("metric",))
    assert CampaignClip.objects.get(campaign=campaign).open_slots == 1
    _counters_consistent(campaign)

    # The opened slot is served: a third worker rates the clip, and only the far candidate.
    body = _rate(_client(crowd_join(campaign, "metric-service-2")[0]), 4)
    assert body is not None
    assert [candidate["id"] for candidate in body["candidates"]] == [far.pk]
    # Three agreeing ratings, the metric still far: it wants more, up to the maximum.
    assert _state(campaign)[far.pk] == (4, 3, "", ("metric",))


@pytest.mark.django_db
def test_a_fixed_campaign_is_left_alone_by_a_redecision():
    campaign = crowd_campaign(clips=1, candidates_per_clip=1, judgments_per_candidate=3)
    candidate = CampaignCandidate.objects.get(campaign=campaign)
    CampaignCandidate.objects.filter(pk=candidate.pk).update(metric_score=1.0)
    assert allocation_redecide(campaign_id=campaign.pk, campaign_candidate_ids=[candidate.pk]) == 0
    assert _state(campaign)[candidate.pk] == (3, 0, "", ())


@pytest.mark.slow
def test_the_task_sent_by_name_opens_a_slot_in_a_real_worker(celery_worker_process):
    campaign = _settled_campaign("metric-task")
    first, second = CampaignCandidate.objects.filter(campaign=campaign).order_by("id")
    CampaignCandidate.objects.filter(pk=second.pk).update(metric_score=1.0, metric_uncertainty=0.0)
    # As the metric's scoring job sends it: by name, with keyword arguments.
    assert publish_now(
        task_named("annotation.allocation_redecide"),
        campaign_id=campaign.pk,
        campaign_candidate_ids=[first.pk, second.pk],
    )
    wait_until(
        lambda: CampaignCandidate.objects.filter(pk=second.pk, quota=3).exists(),
        timeout=60,
        message="the worker's redecision",
    )
    state = _state(campaign)
    assert state[second.pk] == (3, 2, "", ("metric",))
    assert state[first.pk] == (2, 2, StopReason.SETTLED, ())
    assert CampaignClip.objects.get(campaign=campaign).open_slots == 1
    assert not CampaignCandidate.objects.filter(
        Q(campaign=campaign) & ~Q(pk=second.pk) & Q(quota__gt=2)
    ).exists()


@pytest.mark.django_db
def test_the_policy_is_frozen_once_workers_have_rated():
    from annotation.crowd.services.campaigns import CampaignInvalid, campaign_update

    campaign = crowd_campaign(clips=1, candidates_per_clip=1, allocation=ADAPTIVE)
    _rate(_client(crowd_join(campaign, "frozen-0")[0]), 4)
    with pytest.raises(CampaignInvalid) as refused:
        campaign_update(campaign=campaign, allocation={})
    assert refused.value.errors == {
        "allocation": ["Cannot change once workers have submitted judgments."]
    }
    # Its own policy posted back (as the edit page does) is no change.
    campaign_update(campaign=campaign, allocation=dict(ADAPTIVE), name="Renamed")
    campaign.refresh_from_db()
    assert (campaign.name, campaign.allocation["maximum"]) == ("Renamed", 5)


@pytest.mark.django_db
def test_the_figures_count_the_open_quota_and_bound_what_may_still_open(curator_client):
    campaign = crowd_campaign(clips=1, candidates_per_clip=2, allocation=ADAPTIVE)
    for n, value in enumerate((2, 4)):
        _rate(_client(crowd_join(campaign, f"figures-{n}")[0]), value)
    # Both candidates disagree (range 2): quota 3 each, 2 kept, 3 more may open each (to 5).
    assert set(_state(campaign).values()) == {(3, 2, "", ("range",))}
    api = curator_client.get(f"/api/v1/campaigns/{campaign.slug}/").json()["figures"]
    summary = curator_client.get(f"/api/v1/campaigns/{campaign.slug}/quality").json()["progress"]
    expected = {"slots_total": 6, "slots_filled": 4, "judgments_needed": 2}
    assert {name: api[name] for name in expected} == expected
    assert api["judgments_needed_at_most"] == 2 + 2 * (5 - 3)
    assert summary["figures"] == api
    page = curator_client.get(f"/dashboard/campaigns/{campaign.slug}/").content.decode()
    assert '<span data-figure="judgments_needed_at_most">6</span>' in page
    assert '<span data-figure="judgments_needed">2</span>' in page
    # No crowd pace problem here: the two judgments are today's, so both dates exist.
    assert summary["estimated_completion"] is not None
    assert summary["latest_completion"] >= summary["estimated_completion"]


@pytest.mark.django_db
def test_the_release_records_what_the_flow_decided():
    """End to end: the worker API drives two adaptive campaigns (raters who agree, raters who
    split by 2 on every clip), aggregation finalises them, and the release's records carry each
    candidate's kept judgments, stop reason and opened_by as the slot engine left them."""
    agree = crowd_campaign(slug="agree", clips=2, candidates_per_clip=2, allocation=ADAPTIVE)
    split = crowd_campaign(slug="split", clips=2, candidates_per_clip=2, allocation=ADAPTIVE)
    for campaign, values in ((agree, (4, 4, 4)), (split, (4, 2, 3, 3, 3, 3))):
        for n, value in enumerate(values):
            client = _client(crowd_join(campaign, f"{campaign.slug}-{n}")[0])
            while _rate(client, value) is not None:
                pass
        aggregation_recompute(campaign=campaign)
    expected = {
        item.candidate.external_id: (item.kept_judgments, item.stop_reason, item.opened_by)
        for item in CampaignCandidate.objects.filter(campaign__in=[agree, split]).select_related(
            "candidate"
        )
    }
    # What the engine decided: agreeing raters stop at the minimum, split ones at the maximum.
    assert sorted(
        {(kept, reason, tuple(opened)) for kept, reason, opened in expected.values()}
    ) == [
        (2, StopReason.SETTLED, ()),
        (5, StopReason.MAXIMUM, ("range",)),
    ]
    assert all(item.is_finalised for item in CampaignCandidate.objects.filter(campaign=split))
    release = build(campaigns=[agree, split], seed=3)
    records = [
        record for name in ("train", "validation") for record in jsonl_records(release, name)
    ]
    assert {
        record["candidate_id"]: (record["judgments"], record["stop_reason"], record["opened_by"])
        for record in records
    } == expected
