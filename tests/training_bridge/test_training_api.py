"""The training API: curators only, validation, cancel/resume transitions, the score endpoint's
checks, and the OpenAPI schema."""

from __future__ import annotations

import pytest
from django.test import Client

from common.models import JobStatus
from training_bridge.models import ScoreRequest, TrainingRun
from training_bridge.services import training_run_create

pytestmark = pytest.mark.django_db


def _create(client: Client, **body: object):  # type: ignore[no-untyped-def]
    return client.post("/api/v1/training/runs", body, content_type="application/json")


def test_only_curators_reach_the_training_api(client, outsider, published_release):
    assert client.get("/api/v1/training/runs").status_code == 403
    client.force_login(outsider)
    assert client.get("/api/v1/training/runs").status_code == 403
    assert _create(client, release=published_release.pk).status_code == 403
    assert client.post("/api/v1/score", {}, content_type="application/json").status_code == 403
    assert TrainingRun.objects.count() == 0


def test_a_curator_starts_a_run_and_its_chain_is_published_after_commit(
    curator_client, published_release, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = _create(
            curator_client,
            release=published_release.pk,
            backbone="tiny",
            ablation="phase1_only",
            hyperparameters={"phase1_epochs": 7, "temperature": 1.5},
            name="first",
        )
    assert response.status_code == 201, response.json()
    body = response.json()
    run = TrainingRun.objects.get(pk=body["id"])
    assert body["status"] == "queued"
    assert body["release"] == published_release.pk
    assert (run.backbone, run.ablation, run.name, run.trigger) == (
        "tiny",
        "phase1_only",
        "first",
        "api",
    )
    assert run.hyperparameters["phase1_epochs"] == 7
    assert run.hyperparameters["temperature"] == 1.5
    assert run.hyperparameters["lora_rank"] == 8  # defaults are stored too: the run is replayable
    assert len(callbacks) == 1  # the chain goes to the broker only once the row is committed
    listed = curator_client.get("/api/v1/training/runs").json()
    assert [item["id"] for item in listed] == [run.pk]
    detail = curator_client.get(f"/api/v1/training/runs/{run.pk}").json()
    assert detail["history"] == [] and detail["evaluation"] == {}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"hyperparameters": {"lerning_rate": 1}}, "unknown hyper-parameters: lerning_rate"),
        ({"hyperparameters": {"phase1_epochs": 0}}, "phase1_epochs must be at least 1"),
        ({"ablation": "nothing"}, "is not a valid choice"),
        ({"device": "tpu"}, "does not match"),
    ],
)
def test_invalid_runs_are_refused_and_nothing_is_created(
    curator_client, published_release, body, message
):
    response = _create(curator_client, release=published_release.pk, **body)
    assert response.status_code == 400
    assert message in str(response.json())
    assert TrainingRun.objects.count() == 0


def test_the_api_refuses_a_device_the_training_machine_does_not_have(
    curator_client, published_release, cpu_only_machine, settings
):
    response = _create(curator_client, release=published_release.pk, device="cuda:1")
    assert response.status_code == 400
    assert response.json()["device"] == [
        "cuda:1 is not a device of the training machine, which offers cpu. Set "
        "LEPUS_TRAINING_DEVICES when the training workers are other machines."
    ]
    assert TrainingRun.objects.count() == 0
    # Training workers elsewhere: the setting names their devices, and the same request passes.
    settings.LEPUS_TRAINING_DEVICES = ["cpu", "cuda"]
    response = _create(curator_client, release=published_release.pk, device="cuda:1")
    assert response.status_code == 201, response.json()
    assert TrainingRun.objects.get().device == "cuda:1"


def test_a_release_that_is_not_published_cannot_be_trained(curator_client, published_release):
    published_release.status = JobStatus.RUNNING
    published_release.save(update_fields=["status"])
    response = _create(curator_client, release=published_release.pk)
    assert response.status_code == 400
    assert "release whose build succeeded" in str(response.json())
    assert TrainingRun.objects.count() == 0


def test_cancel_and_resume_move_the_run_between_states(curator_client, published_release):
    run = training_run_create(release=published_release, backbone="tiny", start=False)
    token = run.chain_token
    response = curator_client.post(f"/api/v1/training/runs/{run.pk}/cancel")
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == JobStatus.CANCELLED and run.finished_at is not None
    assert curator_client.post(f"/api/v1/training/runs/{run.pk}/cancel").status_code == 409

    response = curator_client.post(f"/api/v1/training/runs/{run.pk}/resume")
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == JobStatus.QUEUED
    assert run.cancel_requested is False
    assert run.chain_token != token  # the old chain's messages are now stale
    assert curator_client.post(f"/api/v1/training/runs/{run.pk}/resume").status_code == 409


def test_cancelling_a_running_run_asks_its_step_to_stop(curator_client, published_release):
    run = training_run_create(release=published_release, backbone="tiny", start=False)
    TrainingRun.objects.filter(pk=run.pk).update(status=JobStatus.RUNNING)
    assert curator_client.post(f"/api/v1/training/runs/{run.pk}/cancel").status_code == 200
    run.refresh_from_db()
    assert run.status == JobStatus.RUNNING  # the step ends it at its next progress report
    assert run.cancel_requested is True


def test_a_stale_chain_message_does_nothing(published_release):
    from training_bridge.services import training_run_execute_step

    run = training_run_create(release=published_release, backbone="tiny", start=False)
    assert training_run_execute_step(run_id=run.pk, step="teacher", token="old") == "stale"
    assert (
        training_run_execute_step(run_id=run.pk, step="phase1", token=run.chain_token) == "waiting"
    )
    run.refresh_from_db()
    assert run.status == JobStatus.QUEUED and run.attempts == 0


def _finished_run(release):  # type: ignore[no-untyped-def]
    run = training_run_create(release=release, backbone="tiny", start=False)
    TrainingRun.objects.filter(pk=run.pk).update(status=JobStatus.SUCCEEDED)
    run.refresh_from_db()
    return run


def _score(client: Client, **body: object):  # type: ignore[no-untyped-def]
    return client.post("/api/v1/score", body, content_type="application/json")


def test_scoring_needs_a_succeeded_run_known_clips_and_references(
    curator_client, published_release, settings
):
    row = published_release.test_records["validation"][0]
    item = {"clip": row["clip_id"], "references": row["references"], "candidate": "a dog"}
    queued = training_run_create(release=published_release, backbone="tiny", start=False)
    response = _score(curator_client, run=queued.pk, items=[item])
    assert response.status_code == 400
    assert "only a succeeded run can score" in str(response.json())

    run = _finished_run(published_release)
    response = _score(curator_client, run=run.pk, items=[{**item, "clip": "nope"}])
    assert response.status_code == 400 and "unknown clip 'nope'" in str(response.json())
    response = _score(curator_client, run=run.pk, items=[{**item, "references": None}])
    assert response.status_code == 400 and "reference-based" in str(response.json())
    settings.LEPUS_SCORE_MAX_ITEMS = 2
    response = _score(curator_client, run=run.pk, items=[item] * 3)
    assert response.status_code == 400 and "at most 2 items" in str(response.json())
    assert ScoreRequest.objects.count() == 0


def test_a_score_request_is_queued_and_polled(
    curator_client, published_release, django_capture_on_commit_callbacks
):
    run = _finished_run(published_release)
    row = published_release.test_records["validation"][0]
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = _score(
            curator_client,
            run=run.pk,
            items=[{"clip": row["clip_id"], "references": row["references"], "candidate": "x"}],
        )
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "queued" and body["scores"] is None
    assert len(callbacks) == 1
    stored = ScoreRequest.objects.get(pk=body["id"])
    assert stored.items[0]["frames_key"] == row["frames_key"]
    ScoreRequest.objects.filter(pk=stored.pk).update(status=JobStatus.SUCCEEDED, scores=[0.25])
    polled = curator_client.get(f"/api/v1/score/{stored.pk}").json()
    assert polled["status"] == "succeeded" and polled["scores"] == [0.25]


def test_the_score_endpoint_is_throttled(curator_client, settings, monkeypatch):
    from django.core.cache import cache
    from rest_framework.throttling import ScopedRateThrottle

    cache.clear()
    # ScopedRateThrottle copied the rates at import; give it a low "score" rate for this test only.
    monkeypatch.setattr(
        ScopedRateThrottle,
        "THROTTLE_RATES",
        {**ScopedRateThrottle.THROTTLE_RATES, "score": "2/min"},
    )
    try:
        codes = [_score(curator_client, run=999, items=[]).status_code for _ in range(3)]
    finally:
        cache.clear()
    assert codes == [400, 400, 429]


def test_every_training_operation_is_in_the_schema(curator_client):
    response = curator_client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert set(paths["/api/v1/training/runs"]) >= {"get", "post"}
    assert "get" in paths["/api/v1/training/runs/{run_id}"]
    assert "post" in paths["/api/v1/training/runs/{run_id}/cancel"]
    assert "post" in paths["/api/v1/training/runs/{run_id}/resume"]
    assert "post" in paths["/api/v1/score"]
    assert "get" in paths["/api/v1/score/{request_id}"]
    schemas = response.json()["components"]["schemas"]
    assert "items" in schemas["ScoreCreateRequest"]["properties"]
