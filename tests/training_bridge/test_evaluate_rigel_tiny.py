"""`evaluate_rigel` end to end on CPU with the tiny random backbone: a run trained inline, then
scored on a small VATEX-EVAL campaign through the API's job (executed here as the task would) and
through the command; the run's page offers it and the evaluation page shows the tables."""

from __future__ import annotations

import io
import json
import math

import pytest
from django.core.management import call_command

from common.models import JobStatus
from tests.training_bridge.rigel_benchmark_support import benchmark_campaign
from training_bridge.models import RigelEvaluation, TrainingRun
from training_bridge.services.rigel_benchmark import rigel_evaluation_execute

# Training and three scoring passes of the tiny model: a few minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.django_db, pytest.mark.timeout(1500)]

SETTINGS = [
    "--set", "frames=4",
    "--set", "teacher_batch_size=4",
    "--set", "teacher_shard_size=8",
    "--set", "phase1_epochs=2",
    "--set", "phase2_batch_size=4",
    "--set", "phase2_micro_batch_size=4",
    "--set", "eval_batch_size=8",
    "--set", 'standard_metrics=["bleu4"]',
]  # fmt: skip
PROTOCOLS = ["reference-free", "1-ref", "all-refs"]


def test_a_trained_run_is_evaluated_by_the_job_the_api_the_page_and_the_command(
    published_release, curator_client, django_capture_on_commit_callbacks
):
    out = io.StringIO()
    call_command(
        "train", "--release", str(published_release.pk), "--backbone", "tiny", "--inline",
        "--json", *SETTINGS, stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    run = TrainingRun.objects.get(pk=json.loads(out.getvalue())["run"])
    assert run.status == JobStatus.SUCCEEDED, run.error
    campaign = benchmark_campaign(12)

    page = curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    assert "Evaluate on a benchmark" in page and 'value="vatex-eval"' in page

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = curator_client.post(
            "/api/v1/training/evaluations",
            {"runs": [run.pk], "campaign": campaign.slug, "protocols": [*PROTOCOLS, "foil"],
             "metrics": ["bleu4"]},
            content_type="application/json",
        )  # fmt: skip
    assert response.status_code == 201, response.content
    assert len(callbacks) == 1  # the job is enqueued once the row is committed
    evaluation = RigelEvaluation.objects.get(pk=response.json()["id"])
    assert evaluation.status == JobStatus.QUEUED

    assert rigel_evaluation_execute(evaluation_id=evaluation.pk) == "ok"
    data = curator_client.get(f"/api/v1/training/evaluations/{evaluation.pk}").json()
    assert data["status"] == "succeeded", data["error"]
    result = data["result"]
    key = f"run:{run.pk}"
    assert result["protocol_order"] == PROTOCOLS  # jsonb keeps no key order: kept explicitly
    for protocol in PROTOCOLS:
        row = result["protocols"][protocol]["rows"][key]
        assert all(
            isinstance(row[s], float) and math.isfinite(row[s]) and -100 <= row[s] <= 100
            for s in ("kendall_b", "kendall_c", "spearman", "pearson")
        ), row
    foil = result["foil"]
    assert foil["pairs"] == len(foil["swaps"]) >= 1
    assert foil["settings"]["reference-free"]["rows"][key]["accuracy"] is not None

    page = curator_client.get(f"/dashboard/training/evaluations/{evaluation.pk}/").content.decode()
    assert f'<tr data-metric="{key}">' in page
    assert "paper: Rigel (Qwen3-VL-2B), Table 2" in page
    assert 'id="foil"' in page

    # The command gives the same Rigel figures (CPU scoring is deterministic).
    out = io.StringIO()
    call_command(
        "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
        "--protocol", ",".join(PROTOCOLS), "--metrics", "bleu4", "--json",
        stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    again = json.loads(out.getvalue())
    for protocol in PROTOCOLS:
        assert (
            again["protocols"][protocol]["rows"][key] == result["protocols"][protocol]["rows"][key]
        )
