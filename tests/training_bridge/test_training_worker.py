"""The whole chain through a real Celery worker on the tiny random Qwen3-VL: a run ends succeeded
with every artifact; a worker killed mid-Phase 2 leaves a run that is reaped (never stuck running)
and resumes from its checkpoint to success; the scoring API answers through the worker."""

from __future__ import annotations

import json
import time

import pytest

from common import storage
from common.models import JobStatus
from common.tasks import reap_orphaned_jobs
from tests.rigel.release_support import tiny_settings
from tests.support.processes import CeleryWorker, wait_until
from tests.training_bridge.training_fixtures import make_published_release
from training_bridge.models import TrainingRun
from training_bridge.services import training_run_create, training_run_resume

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

ARTIFACTS = {
    "head",
    "adapter_weights",
    "adapter_config",
    "metrics",
    "evaluation",
    "evaluation_markdown",
    "log",
}


def _wait_finished(run: TrainingRun, worker: CeleryWorker, timeout: float = 240) -> TrainingRun:
    def finished() -> bool:
        run.refresh_from_db()
        if worker.process and worker.process.poll() is not None:
            raise AssertionError(f"worker died:\n{worker.log()[-4000:]}")
        return run.is_finished

    try:
        wait_until(finished, timeout=timeout, interval=0.5, message=f"run {run.pk} to finish")
    except TimeoutError:
        raise AssertionError(f"run {run.pk} is {run.status}; worker log:\n{worker.log()[-4000:]}")
    return run


def test_a_run_goes_through_the_chain_on_a_worker_and_scores_through_the_api(
    celery_worker_process, curator
):
    release = make_published_release()
    run = training_run_create(
        release=release,
        backbone="tiny",
        device="cpu",
        hyperparameters=tiny_settings(),
        created_by=curator,
    )
    run = _wait_finished(run, celery_worker_process)
    assert run.status == JobStatus.SUCCEEDED, run.error
    assert run.completed_steps == ["teacher", "phase1", "phase2", "evaluate"]
    assert run.progress == 1.0
    assert set(run.artifacts) == ARTIFACTS
    for key in run.artifacts.values():
        assert storage.exists(key), key
    # The teacher pass read every train and validation sample once.
    assert run.step_results["teacher"]["computed"] == 12 + 8
    assert run.step_results["teacher"]["reused"] is False
    # Curves: one Phase 1 point per epoch (3), one Phase 2 point per optimiser step (12 / 4).
    phase1 = [p for p in run.history if p["phase"] == "phase1"]
    phase2 = [p for p in run.history if p["phase"] == "phase2"]
    assert [p["epoch"] for p in phase1] == [1, 2, 3]
    assert [p["step"] for p in phase2] == [1, 2, 3]
    assert set(run.metrics) == {"test"}
    assert set(run.metrics["test"]) == {"kendall_b", "kendall_c", "spearman", "pearson"}
    table = json.loads(storage.read_bytes(run.artifacts["evaluation"]))
    assert (table["result_split"], table["selection_split"]) == ("test", "validation")
    assert table["splits"]["validation"]["n"] == 8
    assert table["splits"]["validation"]["role"] == "model selection"
    assert table["splits"]["test"]["role"] == "result"
    rows = table["splits"]["test"]["rows"]
    # Rigel side by side with the standard metrics on the same candidates (METEOR needs Java).
    assert {"rigel", "bleu4", "rougeL", "cider"} <= set(rows)
    assert rows["rigel"] == run.metrics["test"]
    scores = storage.read_bytes(f"{run.storage_prefix}/artifacts/scores/validation.jsonl")
    assert len(scores.decode().strip().splitlines()) == 8
    # Phase 2's checkpoints are removed once the adapter is stored.
    assert storage.list_keys(f"{run.storage_prefix}/checkpoints") == []
    assert "evaluate: finished" in storage.read_bytes(run.artifacts["log"]).decode()

    # Scoring through the API: the web side records a request, the worker scores it.
    from django.test import Client

    client = Client()
    client.force_login(curator)
    row = release.test_records["validation"][0]
    response = client.post(
        "/api/v1/score",
        {
            "run": run.pk,
            "wait": 60,
            "items": [
                {"clip": row["clip_id"], "references": row["references"], "candidate": row["text"]},
                {"clip": row["clip_id"], "references": row["references"], "candidate": "a dog"},
            ],
        },
        content_type="application/json",
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "succeeded"
    assert len(body["scores"]) == 2
    assert all(0.0 <= score <= 1.0 for score in body["scores"])
    # The same candidate scores the same as in the evaluation of the run.
    evaluated = {
        json.loads(line)["candidate_id"]: json.loads(line)["score"]
        for line in scores.decode().strip().splitlines()
    }
    assert body["scores"][0] == pytest.approx(evaluated[row["candidate_id"]], abs=1e-4)


def test_a_killed_worker_leaves_the_run_resumable_from_its_checkpoint(settings, curator):
    release = make_published_release(seed=3)
    # Slow Phase 2 steps (a pause of the test worker) so the kill lands after a checkpoint, mid-phase.
    slow = CeleryWorker(pauses={"training.step": 1.5}).start()
    from tests.support.processes import purge_broker

    try:
        run = training_run_create(
            release=release,
            backbone="tiny",
            device="cpu",
            hyperparameters=tiny_settings(phase2_batch_size=2, phase2_micro_batch_size=2),
            created_by=curator,
        )

        def checkpointed() -> bool:
            run.refresh_from_db()
            return int(run.checkpoint.get("phase2", {}).get("step", 0)) >= 2

        wait_until(checkpointed, timeout=240, interval=0.2, message="a Phase 2 checkpoint")
        slow.kill()
    finally:
        slow.stop()
    run.refresh_from_db()
    assert run.status == JobStatus.RUNNING  # the dead worker cannot say otherwise
    assert run.phase == "phase2"
    checkpoint_step = run.checkpoint["phase2"]["step"]
    assert storage.exists(run.checkpoint["phase2"]["key"])
    # Nothing of the unfinished Phase 2 is published: no adapter, no metrics, no evaluation.
    assert not {"adapter_weights", "adapter_config", "metrics", "evaluation"} & set(run.artifacts)
    assert (run.metrics, run.evaluation) == ({}, {})
    teacher_result = run.step_results["teacher"]

    # The reaper (beat, every minute) fails runs whose heartbeat stopped.
    settings.LEPUS_JOB_HEARTBEAT_TIMEOUT = 1
    time.sleep(2.5)
    assert reap_orphaned_jobs() >= 1
    run.refresh_from_db()
    assert run.status == JobStatus.FAILED
    assert "stopped responding" in run.error

    purge_broker()
    training_run_resume(run=run)
    fresh = CeleryWorker().start()
    try:
        run = _wait_finished(run, fresh)
    finally:
        fresh.stop()
    assert run.status == JobStatus.SUCCEEDED, run.error
    assert run.attempts == 5  # four step claims, plus the Phase 2 claim that died
    assert run.step_results["teacher"] == teacher_result  # not redone
    assert run.step_results["phase2"]["resumed_from_step"] == checkpoint_step
    assert run.step_results["phase2"]["steps"] == 6
    steps = [p["step"] for p in run.history if p["phase"] == "phase2"]
    assert steps == [1, 2, 3, 4, 5, 6]  # the curve is continuous across the crash
    assert set(run.artifacts) == ARTIFACTS
