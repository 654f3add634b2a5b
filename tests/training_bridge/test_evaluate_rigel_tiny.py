"""`evaluate_rigel` end to end on CPU with the tiny random backbone: a model per protocol, as the
paper has it (a run trained inline with `train --reference-free` for the reference-free row, one
trained with references for 1-ref and all-refs), scored on a small VATEX-EVAL campaign through the
API's job (executed here as the task would) and through the command; the run's page offers it and
the evaluation page shows the tables."""

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
    trained = {}
    for flags in ([], ["--reference-free"]):
        out = io.StringIO()
        call_command(
            "train", "--release", str(published_release.pk), "--backbone", "tiny", "--inline",
            "--json", *flags, *SETTINGS, stdout=out, stderr=io.StringIO(),
        )  # fmt: skip
        trained[bool(flags)] = TrainingRun.objects.get(pk=json.loads(out.getvalue())["run"])
    run, free = trained[False], trained[True]
    for each in (run, free):
        assert each.status == JobStatus.SUCCEEDED, each.error
    assert (run.reference_free, free.reference_free) == (False, True)
    # the reference-free run's teacher pass read its own prompt: its own cache, computed afresh
    teacher = free.step_results["teacher"]
    assert teacher["prompt_version"].endswith("-free-f4") and teacher["computed"] > 0
    assert teacher["cache_prefix"] != run.step_results["teacher"]["cache_prefix"]
    campaign = benchmark_campaign(12)

    page = curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    assert "Evaluate on a benchmark" in page and 'value="vatex-eval"' in page

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = curator_client.post(
            "/api/v1/training/evaluations",
            {"runs": [free.pk, run.pk], "campaign": campaign.slug,
             "protocols": [*PROTOCOLS, "noun-swap"], "metrics": ["bleu4"]},
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
    key, free_key = f"run:{run.pk}", f"run:{free.pk}"
    own = {"reference-free": free_key, "1-ref": key, "all-refs": key}
    assert result["protocol_order"] == PROTOCOLS  # jsonb keeps no key order: kept explicitly
    assert result["protocol_mismatch"] == []
    for protocol in PROTOCOLS:
        rows = result["protocols"][protocol]["rows"]
        assert ({key, free_key} & set(rows)) == {own[protocol]}  # each row by its own model
        row = rows[own[protocol]]
        assert all(
            isinstance(row[s], float) and math.isfinite(row[s]) and -100 <= row[s] <= 100
            for s in ("kendall_b", "kendall_c", "spearman", "pearson")
        ), row
    foil = result["foil"]
    assert foil["pairs"] == len(foil["swaps"]) >= 1
    assert foil["settings"]["reference-free"]["rows"][free_key]["accuracy"] is not None
    assert foil["settings"]["reference-based"]["rows"][key]["accuracy"] is not None
    assert key not in foil["settings"]["reference-free"]["rows"]

    page = curator_client.get(f"/dashboard/training/evaluations/{evaluation.pk}/").content.decode()
    assert f'<tr data-metric="{key}">' in page and f'<tr data-metric="{free_key}">' in page
    assert "paper: Rigel (Qwen3-VL-2B), Table 2" in page
    assert 'id="foil"' in page

    # The command gives the same Rigel figures (CPU scoring is deterministic).
    out = io.StringIO()
    call_command(
        "evaluate_rigel", "--runs", f"{free.pk},{run.pk}", "--campaign", campaign.slug,
        "--protocol", ",".join(PROTOCOLS), "--metrics", "bleu4", "--json",
        stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    again = json.loads(out.getvalue())
    for protocol in PROTOCOLS:
        assert (
            again["protocols"][protocol]["rows"][own[protocol]]
            == result["protocols"][protocol]["rows"][own[protocol]]
        )
