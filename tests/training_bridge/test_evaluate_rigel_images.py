"""`evaluate_rigel --image-benchmark` end to end on CPU with the tiny random backbone: a
Flickr8K-Expert sample written here in its published format (token and expert files, JPEGs),
converted by `python -m training_bridge.rigel.cli convert-images`, scored by a run trained inline
(every image one frame through the image path); every figure is recomputed from the scores the
command returns and the expert file, and the paper's row stands beside it with its place."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from PIL import Image
from scipy import stats

from common.models import JobStatus
from training_bridge.models import TrainingRun
from training_bridge.rigel.cli import main as rigel_cli

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(1200)]

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
WORDS = ("dog", "girl", "stairs", "road", "ball", "grass", "pink", "wooden", "runs", "jumps")


def _sample(folder, images: int = 4):  # type: ignore[no-untyped-def]
    """Flickr8k.token.txt, ExpertAnnotations.txt and the pictures, in the published formats."""
    rng = np.random.default_rng(5)
    pictures = folder / "Flicker8k_Dataset"
    pictures.mkdir()
    tokens, expert = [], []
    names = [f"{1000 + k}_x{k}.jpg" for k in range(images)]
    for k, name in enumerate(names):
        pixels = rng.integers(0, 256, (40 + 8 * k, 56, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(pictures / name, format="JPEG")
        for n in range(5):
            words = " ".join(rng.choice(WORDS, 6))
            tokens.append(f"{name}#{n}\tA {words} .")
    for k, name in enumerate(names):
        for other in (k, (k + 1) % images, (k + 2) % images):
            scores = rng.integers(1, 5, 3)
            expert.append(f"{name}\t{names[other]}#{other % 5}\t" + "\t".join(map(str, scores)))
    (folder / "Flickr8k.token.txt").write_text("\n".join(tokens) + "\n")
    (folder / "ExpertAnnotations.txt").write_text("\n".join(expert) + "\n")
    return pictures, expert


def _evaluate(*args: str) -> dict:
    out = io.StringIO()
    call_command("evaluate_rigel", *args, "--json", stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def test_an_image_benchmark_is_scored_with_the_papers_protocol(published_release, tmp_path, capsys):  # type: ignore[no-untyped-def]
    pictures, expert = _sample(tmp_path)
    converted = tmp_path / "expert.jsonl"
    assert rigel_cli([
        "convert-images", "flickr8k-expert",
        "--annotations", str(tmp_path / "ExpertAnnotations.txt"),
        "--captions", str(tmp_path / "Flickr8k.token.txt"), "--out", str(converted),
    ]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["judgments"] == 36

    out = io.StringIO()
    call_command(
        "train", "--release", str(published_release.pk), "--backbone", "tiny", "--inline",
        "--json", *SETTINGS, stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    run = TrainingRun.objects.get(pk=json.loads(out.getvalue())["run"])
    assert run.status == JobStatus.SUCCEEDED, run.error
    common = [
        "--run", str(run.pk), "--image-benchmark", str(converted), "--images", str(pictures),
        "--benchmark", "flickr8k-expert",
    ]  # fmt: skip

    result = _evaluate(*common)
    key = f"run:{run.pk}"
    assert result["protocol_order"] == ["all-refs"]  # the run's own (reference-based) setting
    assert (result["images"], result["candidates"], result["unit"]) == (4, 12, "judgment")
    scores = result["scores"][key]["all-refs"]
    assert len(scores) == 12 and all(0.0 <= s <= 1.0 for s in scores)
    assert len(set(scores)) > 1
    # recomputed by hand: every expert judgment a point, in the expert file's order
    metric = [s for s, line in zip(scores, expert, strict=True) for _ in line.split("\t")[2:]]
    human = [int(v) for line in expert for v in line.split("\t")[2:]]
    row = result["protocols"]["all-refs"]["rows"][key]
    assert row["points"] == 36
    # (the table rounds to 4 decimals)
    tau_b = stats.kendalltau(metric, human).statistic
    tau_c = stats.kendalltau(metric, human, variant="c").statistic
    assert row["kendall_b"] == pytest.approx(100 * tau_b, abs=1e-4)
    assert row["kendall_c"] == pytest.approx(100 * tau_c, abs=1e-4)
    assert row["paper"] == {
        "kendall_b": 58.6,
        "kendall_c": 59.0,
        "where": "seed 000, Table 1, line 73",
    }
    assert row["protocol_mismatch"] is False

    # the reference-free row belongs to a reference-free run: refused, or scored and labelled
    with pytest.raises(CommandError, match="protocol mismatch"):
        _evaluate(*common, "--protocol", "reference-free")
    mismatched = _evaluate(*common, "--protocol", "reference-free", "--allow-protocol-mismatch")
    free_row = mismatched["protocols"]["reference-free"]["rows"][key]
    assert free_row["protocol_mismatch"] is True
    assert mismatched["protocol_mismatch"] == [
        {"run": run.pk, "trained": "reference-based", "protocol": "reference-free"}
    ]
    assert mismatched["scores"][key]["reference-free"] != scores  # the prompt has no references

    # `manage.py score` on a still image gives the benchmark's score for the same triple
    first = json.loads(converted.read_text().splitlines()[0])
    triple = {
        "image": str(pictures / first["image"]),
        "references": first["references"],
        "candidate": first["candidates"][0]["caption"],
    }
    source = tmp_path / "triples.jsonl"
    source.write_text(json.dumps(triple) + "\n")
    out = io.StringIO()
    call_command("score", "--run", str(run.pk), "--input", str(source), "--json", stdout=out)
    assert json.loads(out.getvalue())["scores"][0] == pytest.approx(scores[0], abs=1e-5)

    (pictures / "1000_x0.jpg").unlink()
    with pytest.raises(CommandError, match="not in"):
        _evaluate(*common)
