"""The metric in the loop (issue 28, point 2): naming a campaign's metric, refusing a run trained on
the campaign's clips, and the scoring job through a real Celery worker.

The plug-in is BLEU-1 (text only, no weights), so the expected scores are computed here with the
same metric; a Rigel run's scoring path shares everything but the scorer (`rigel_scorer`, whose
moments are checked against a hand-computed distribution)."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import transaction
from django.urls import reverse

from annotation.crowd.services.campaigns import (
    CampaignInvalid,
    campaign_items_add,
    campaign_update,
)
from annotation.models import Campaign, CampaignCandidate
from common.models import JobStatus
from datasets_app.models import CandidateCaption, Clip, ReferenceCaption
from tests.support.processes import wait_until
from tests.training_bridge.rigel_benchmark_support import (
    benchmark_campaign,
    campaign_clips,
    finished_run,
)
from training_bridge.metrics.plugins import MetricItem, available_metrics
from training_bridge.rigel.scoring import rating_moments
from training_bridge.services.campaign_metric import (
    ALLOCATION_REDECIDE_TASK,
    MetricScore,
    campaign_metric_score,
)
from training_bridge.tasks import campaign_metric_score as score_task


def _expected_bleu1(campaign: Campaign) -> dict[int, float]:
    """BLEU-1 of every candidate against its clip's references, on the campaign's 1..5 scale."""
    rows = list(
        CampaignCandidate.objects.filter(campaign=campaign, is_control=False)
        .select_related("candidate")
        .order_by("id")
    )
    references = {
        clip_id: [
            text
            for text in ReferenceCaption.objects.filter(clip_id=clip_id)
            .order_by("position")
            .values_list("text", flat=True)
        ]
        for clip_id in {row.clip_id for row in rows}
    }
    metric = available_metrics({}, ["bleu1"])[0]["bleu1"]
    scores = metric.score(
        [MetricItem(row.candidate.text, tuple(references[row.clip_id])) for row in rows]
    )
    return {row.pk: 1.0 + 4.0 * float(score) for row, score in zip(rows, scores, strict=True)}


def _scores(campaign: Campaign) -> dict[int, float | None]:
    return dict(
        CampaignCandidate.objects.filter(campaign=campaign).values_list("id", "metric_score")
    )


def test_a_plugin_metric_scores_the_candidates_through_the_worker_and_new_ones_when_added(
    celery_worker_process,
):
    campaign = benchmark_campaign(12, frames=False)
    with transaction.atomic():  # the job is sent once the change commits
        campaign_update(campaign=campaign, metric="plugin:bleu1")
    expected = _expected_bleu1(campaign)
    assert len(expected) == 12
    wait_until(
        lambda: None not in _scores(campaign).values(),
        timeout=120,
        message=lambda: f"scores {_scores(campaign)}; worker log: {celery_worker_process.log()}",
    )
    stored = _scores(campaign)
    assert stored == pytest.approx(expected, abs=1e-9)
    # A plug-in gives no distribution: no uncertainty.
    assert set(
        CampaignCandidate.objects.filter(campaign=campaign).values_list(
            "metric_uncertainty", flat=True
        )
    ) == {None}
    # A candidate added later is scored when it is added; the others keep their scores.
    first = CampaignCandidate.objects.filter(campaign=campaign).order_by("id").first()
    assert first is not None
    added = CandidateCaption.objects.create(
        clip=first.clip,
        external_id="added-later",
        text="a man is playing a guitar on a stage",
        position=99,
    )
    with transaction.atomic():
        assert campaign_items_add(campaign=campaign, candidate_ids=[added.pk]) == 1
    item = CampaignCandidate.objects.get(campaign=campaign, candidate=added)
    expected = _expected_bleu1(campaign)
    wait_until(
        lambda: _scores(campaign)[item.pk] is not None,
        timeout=120,
        message=lambda: f"the added candidate's score; log: {celery_worker_process.log()}",
    )
    assert _scores(campaign) == pytest.approx(expected, abs=1e-9)
    assert "annotation.allocation_redecide" in celery_worker_process.log()


def _broker_messages(queue: str) -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    """(task name, kwargs) of the messages waiting in `queue` of the test broker (taken off it)."""
    from config.celery import app

    messages = []
    with app.connection_for_write() as connection:
        simple = connection.SimpleQueue(queue)
        try:
            while True:
                try:
                    message = simple.get(block=False)
                except simple.Empty:
                    break
                messages.append((message.headers["task"], message.decode()[1]))
                message.ack()
        finally:
            simple.close()
    return messages


def test_the_job_is_idempotent_keeps_going_past_a_bad_item_and_asks_to_redecide(
    transactional_db,
):
    from tests.support.processes import purge_broker

    purge_broker()
    campaign = benchmark_campaign(12, frames=False)
    Campaign.objects.filter(pk=campaign.pk).update(metric="plugin:bleu1")
    rows = list(CampaignCandidate.objects.filter(campaign=campaign).order_by("id"))
    bad = rows[3].pk

    def scorer(batch):  # type: ignore[no-untyped-def]
        if any(row.pk == bad for row in batch):
            raise ValueError("this clip has no media")
        return [MetricScore(float(row.pk % 5) + 1.0, 0.5) for row in batch]

    result = campaign_metric_score(campaign_id=campaign.pk, scorer=scorer)
    assert sorted(result.scored) == sorted(row.pk for row in rows if row.pk != bad)
    assert list(result.failed) == [bad] and "no media" in result.failed[bad]
    stored = _scores(campaign)
    assert stored[bad] is None
    assert {pk: score for pk, score in stored.items() if pk != bad} == {
        row.pk: float(row.pk % 5) + 1.0 for row in rows if row.pk != bad
    }
    # The allocation engine is asked to re-decide exactly the candidates scored.
    sent = _broker_messages("default")
    assert sent == [
        (
            ALLOCATION_REDECIDE_TASK,
            {"campaign_id": campaign.pk, "campaign_candidate_ids": sorted(result.scored)},
        )
    ]
    # Run again: only the bad item is tried (and now it scores); nothing else is rewritten.
    bad = -1
    again = campaign_metric_score(campaign_id=campaign.pk, scorer=scorer)
    assert again.scored == [rows[3].pk] and again.failed == {}
    assert _scores(campaign)[rows[3].pk] == float(rows[3].pk % 5) + 1.0
    assert _broker_messages("default") == [
        (
            ALLOCATION_REDECIDE_TASK,
            {"campaign_id": campaign.pk, "campaign_candidate_ids": [rows[3].pk]},
        )
    ]
    assert campaign_metric_score(campaign_id=campaign.pk, scorer=scorer).scored == []
    assert _broker_messages("default") == []
    # The task's summary, for a campaign that names no metric.
    Campaign.objects.filter(pk=campaign.pk).update(metric="")
    assert score_task(campaign.pk)["refused"] == "the campaign names no metric"


def _leaking_campaign(release) -> Campaign:  # type: ignore[no-untyped-def]
    """A campaign over 6 VATEX-EVAL candidates (one clip) plus one candidate on each of the release's 7 clips
    (3 train, 2 validation, 2 test)."""
    campaign = benchmark_campaign(6, frames=False)
    own = {row["clip_id"] for rows in release.test_records.values() for row in rows}
    item = CampaignCandidate.objects.filter(campaign=campaign).first()
    assert item is not None
    for clip in Clip.objects.filter(vatex_id__in=own):
        candidate = item.candidate
        candidate.pk = None
        candidate.clip = clip
        candidate.external_id = f"leak:{clip.vatex_id}"
        candidate.save()
        CampaignCandidate.objects.create(campaign=campaign, candidate=candidate, clip=clip, quota=3)
    assert campaign_clips(campaign).count() == 1 + 7
    return campaign


@pytest.mark.django_db
def test_a_run_trained_on_the_campaigns_clips_is_refused_on_every_surface(
    published_release, curator_client, django_capture_on_commit_callbacks
):
    run = finished_run(published_release)
    campaign = _leaking_campaign(published_release)
    with django_capture_on_commit_callbacks() as sent, pytest.raises(CampaignInvalid) as caught:
        campaign_update(campaign=campaign, metric=f"rigel-run:{run.pk}")
    message = caught.value.errors["metric"][0]
    assert "leakage" in message and "5 of the 8 benchmark clips" in message
    assert "train (3)" in message and "validation (2)" in message
    response = curator_client.patch(
        f"/api/v1/campaigns/{campaign.slug}/",
        {"metric": f"rigel-run:{run.pk}"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "leakage" in response.json()["metric"][0]
    campaign.refresh_from_db()
    assert campaign.metric == "" and sent == []
    # The job refuses too (candidates imported after the metric was named can leak).
    Campaign.objects.filter(pk=campaign.pk).update(metric=f"rigel-run:{run.pk}")
    result = campaign_metric_score(campaign_id=campaign.pk)
    assert "leakage" in result.refused and result.scored == []
    assert set(_scores(campaign).values()) == {None}


@pytest.mark.django_db
def test_only_a_finished_run_or_a_known_text_plugin_is_accepted(
    published_release, curator_client, django_capture_on_commit_callbacks
):
    campaign = benchmark_campaign(6, frames=False)
    run = finished_run(published_release)
    queued = finished_run(published_release)
    queued.status = JobStatus.QUEUED
    queued.save(update_fields=["status"])
    refusals = {
        f"rigel-run:{queued.pk}": f"Training run {queued.pk} is queued",
        "rigel-run:999999": "No training run 999999.",
        "plugin:nonesuch": "No metric plug-in 'nonesuch'",
        "plugin:clipscore": "Metric clipscore cannot run here",
        "bleu4": "rigel-run:<training run id> or plugin:<metric name>",
    }
    for metric, words in refusals.items():
        with pytest.raises(CampaignInvalid) as caught:
            campaign_update(campaign=campaign, metric=metric)
        assert words in caught.value.errors["metric"][0], metric
    with django_capture_on_commit_callbacks() as sent:
        campaign_update(campaign=campaign, metric=f"rigel-run:{run.pk}")
    campaign.refresh_from_db()
    assert campaign.metric == f"rigel-run:{run.pk}" and len(sent) == 1
    # The page's form offers the field and shows the service's refusal.
    page = curator_client.post(
        reverse("annotation:campaign-edit", args=[campaign.slug]),
        {
            "name": campaign.name,
            "judgments_per_candidate": 3,
            "status": campaign.status,
            "question_preset": "custom",
            "questions_json": '[{"key": "overall", "label": "Overall"}]',
            "rubric": campaign.rubric,
            "lease_seconds": 900,
            "min_seconds_on_clip": 0,
            "pay_per_assignment": "0",
            "currency": "GBP",
            "metric": "plugin:nonesuch",
            "erasure_mode": campaign.erasure_mode,
        },
    ).content.decode()
    assert "No metric plug-in &#x27;nonesuch&#x27;" in page


def test_rigel_moments_are_the_expected_rating_and_its_spread():
    probabilities = np.array([[0.0, 0.0, 1.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0, 0.5]])
    expected, spread = rating_moments(probabilities)
    assert expected.tolist() == [3.0, 3.0]
    assert spread.tolist() == [0.0, 2.0]


@pytest.mark.django_db
def test_a_judgments_import_that_adds_candidates_asks_for_their_scores(
    django_capture_on_commit_callbacks,
):
    from annotation.questions import default_questions
    from datasets_app.services.imports import candidates_import
    from tests.datasets_app.helpers import EXAMPLES, created_counts, run_command
    from tests.factories import CampaignFactory
    from tests.support.processes import purge_broker

    purge_broker()
    candidates_import(path=EXAMPLES / "candidates.jsonl")
    judgments = str(EXAMPLES / "judgments.jsonl")
    # A campaign without a metric asks for nothing.
    CampaignFactory(slug="plain", questions=default_questions())
    with django_capture_on_commit_callbacks(execute=True):
        result = run_command("import_judgments", judgments, "--campaign", "plain")
    assert created_counts(result)["campaign_candidates"] == 3
    assert _broker_messages("training") == []
    CampaignFactory(slug="crowd", questions=default_questions(), metric="plugin:bleu1")
    campaign = Campaign.objects.get(slug="crowd")
    with django_capture_on_commit_callbacks(execute=True):
        result = run_command("import_judgments", judgments, "--campaign", "crowd")
    assert created_counts(result)["campaign_candidates"] == 3
    assert _broker_messages("training") == [
        ("training_bridge.tasks.campaign_metric_score", {"campaign_id": campaign.pk})
    ]
