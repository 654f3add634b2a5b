"""`manage.py train` (in-process with --inline), the teacher cache reused by a second run, and
`manage.py score` on a finished run."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from common import storage
from common.models import JobStatus
from training_bridge.models import TrainingRun
from training_bridge.rigel import teacher as teacher_module

pytestmark = pytest.mark.django_db

SETTINGS = [
    "--set", "frames=4",
    "--set", "teacher_batch_size=4",
    "--set", "teacher_shard_size=8",
    "--set", "phase1_epochs=2",
    "--set", "phase2_batch_size=4",
    "--set", "phase2_micro_batch_size=4",
    "--set", "eval_batch_size=8",
    "--set", 'standard_metrics=["bleu4", "rougeL", "cider"]',
]  # fmt: skip


def train(release_id: int, *extra: str) -> dict:
    out = StringIO()
    call_command(
        "train", "--release", str(release_id), "--backbone", "tiny", "--inline", "--json",
        *SETTINGS, *extra, stdout=out, stderr=StringIO(),
    )  # fmt: skip
    return json.loads(out.getvalue())


def test_train_prints_the_run_a_second_run_reuses_the_teacher_cache_another_prompt_does_not(
    published_release, monkeypatch
):
    calls = {"forward": 0}
    original = teacher_module.answer_position_outputs

    def counting(backbone, batch):  # type: ignore[no-untyped-def]
        calls["forward"] += 1
        return original(backbone, batch)

    monkeypatch.setattr(teacher_module, "answer_position_outputs", counting)

    first = train(published_release.pk, "--ablation", "phase1_only")
    assert set(first) == {"run", "status", "metrics"}
    assert first["status"] == "succeeded"
    # The results are the test split's; validation only chose Phase 1's epoch.
    assert set(first["metrics"]) == {"test"}
    assert set(first["metrics"]["test"]) == {"kendall_b", "kendall_c", "spearman", "pearson"}
    run = TrainingRun.objects.get(pk=first["run"])
    assert run.trigger == "command"
    assert run.completed_steps == ["teacher", "phase1", "phase2", "evaluate"]
    assert run.step_results["phase2"] == {"skipped": True}
    assert run.step_results["teacher"]["computed"] == 20
    # 12 train + 8 validation samples in batches of 4 (shards of 8 split them 8+4 and 8).
    assert calls["forward"] == 2 + 1 + 2
    cache = run.step_results["teacher"]["cache_prefix"]
    cached_files = storage.list_keys(cache)
    assert len(cached_files) == 5  # 2 train shards + marker, 1 validation shard + marker

    calls["forward"] = 0
    second = train(published_release.pk, "--ablation", "phase1_only", "--set", "seed=1")
    again = TrainingRun.objects.get(pk=second["run"])
    assert second["status"] == "succeeded"
    assert calls["forward"] == 0  # no second teacher pass
    assert again.step_results["teacher"]["reused"] is True
    assert again.step_results["teacher"]["computed"] == 0
    assert again.step_results["teacher"]["cache_prefix"] == cache
    assert storage.list_keys(cache) == cached_files

    # Another prompt (reference-free) is another cache: the teacher runs again.
    third = train(published_release.pk, "--ablation", "phase1_only", "--reference-free")
    free = TrainingRun.objects.get(pk=third["run"]).step_results["teacher"]
    assert free["cache_prefix"] != cache and free["computed"] == 20
    assert calls["forward"] == 5


def test_score_command_gives_one_score_per_line(published_release, tmp_path):
    result = train(published_release.pk)  # the full method: Phase 1 then Phase 2
    run = TrainingRun.objects.get(pk=result["run"])
    assert run.status == JobStatus.SUCCEEDED
    assert set(run.artifacts) >= {"head", "adapter_weights", "adapter_config", "metrics"}
    rows = published_release.test_records["validation"][:3]
    frames_folder = storage.get_storage().path(rows[0]["frames_key"])
    lines = [
        {
            "video": rows[0]["clip_id"],
            "references": rows[0]["references"],
            "candidate": rows[0]["text"],
        },
        {"video": rows[1]["clip_id"], "references": rows[1]["references"], "candidate": "a cat"},
        {"video": frames_folder, "references": ["a dog runs"], "candidate": rows[2]["text"]},
    ]
    source = tmp_path / "triples.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out = StringIO()
    call_command("score", "--run", str(run.pk), "--input", str(source), "--json", stdout=out)
    payload = json.loads(out.getvalue())
    assert payload["run"] == run.pk
    assert payload["count"] == 3
    assert len(payload["scores"]) == 3
    assert all(0.0 <= score <= 1.0 for score in payload["scores"])
    evaluated = {
        json.loads(line)["candidate_id"]: json.loads(line)["score"]
        for line in storage.read_bytes(f"{run.storage_prefix}/artifacts/scores/validation.jsonl")
        .decode()
        .splitlines()
    }
    assert payload["scores"][0] == pytest.approx(evaluated[rows[0]["candidate_id"]], abs=1e-4)


def test_score_refuses_a_reference_based_line_without_references(published_release, tmp_path):
    from training_bridge.services import training_run_create

    run = training_run_create(release=published_release, backbone="tiny", start=False)
    TrainingRun.objects.filter(pk=run.pk).update(status=JobStatus.SUCCEEDED)
    source = tmp_path / "bad.jsonl"
    row = published_release.test_records["validation"][0]
    source.write_text(json.dumps({"video": row["clip_id"], "candidate": "a dog"}) + "\n")
    with pytest.raises(CommandError, match="line 1: this run is reference-based"):
        call_command("score", "--run", str(run.pk), "--input", str(source), "--json")


def test_train_refuses_unknown_hyperparameters(published_release):
    with pytest.raises(CommandError, match="unknown hyper-parameters: lerning_rate"):
        train(published_release.pk, "--set", "lerning_rate=1")
    assert TrainingRun.objects.count() == 0


def test_a_run_reads_and_writes_s3_storage(s3_storage, published_release):
    import boto3
    from django.conf import settings

    result = train(published_release.pk, "--ablation", "phase1_only")
    assert result["status"] == "succeeded"
    run = TrainingRun.objects.get(pk=result["run"])
    client = boto3.client(
        "s3", endpoint_url=settings.LEPUS_S3_ENDPOINT_URL, region_name="us-east-1"
    )
    listed = client.list_objects_v2(Bucket=s3_storage, Prefix="training/")
    keys = {item["Key"] for item in listed.get("Contents", [])}
    assert run.artifacts["head"] in keys
    assert run.artifacts["metrics"] in keys
    cache = run.step_results["teacher"]["cache_prefix"]
    assert f"{cache}/train/complete.json" in keys
