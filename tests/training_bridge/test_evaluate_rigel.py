"""`evaluate_rigel` with a stand-in scorer (the protocols, the per-rater correlations against scipy,
leakage refusal, FOIL accuracy); the tiny-backbone end-to-end test is in
test_evaluate_rigel_tiny.py."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from scipy import stats

from annotation.models import CampaignCandidate, Judgment
from datasets_app.models import Clip, ReferenceCaption
from tests.training_bridge.rigel_benchmark_support import (
    StandInScorer,
    benchmark_campaign,
    campaign_clips,
    finished_run,
)
from training_bridge.services.metric_benchmark import metric_benchmark_compute
from training_bridge.services.rigel_benchmark import (
    RigelEvaluationError,
    result_text,
    rigel_benchmark_evaluate,
)

pytestmark = pytest.mark.django_db
KEYS = ["kendall_b", "kendall_c", "spearman", "pearson"]


def _ordered_items(campaign):  # type: ignore[no-untyped-def]
    """Candidates as the benchmark set orders them, with references and the three rater scores."""
    items = list(
        CampaignCandidate.objects.filter(campaign=campaign)
        .order_by("clip_id", "candidate__position", "id")
        .select_related("candidate")
    )
    rows = []
    for item in items:
        references = list(
            ReferenceCaption.objects.filter(clip_id=item.clip_id)
            .order_by("position")
            .values_list("text", flat=True)
        )
        raters = {
            judgment.participation.worker.external_id: judgment.values["overall"]
            for judgment in Judgment.objects.filter(campaign_candidate=item).select_related(
                "participation__worker"
            )
        }
        rows.append((item.candidate.text, references, [raters[k] for k in sorted(raters)]))
    return rows


def _scipy_per_rater(predicted: np.ndarray, raters: np.ndarray) -> dict[str, float]:
    """The EMScore paper's protocol written out with scipy: scores rounded to 4 decimals, each
    statistic against every rater column, averaged, rounded to 4 decimals, x100."""
    x = np.around(predicted, 4)
    per = {key: [] for key in KEYS}  # type: ignore[var-annotated]
    for column in raters.T:
        per["kendall_b"].append(stats.kendalltau(x, column, variant="b").statistic)
        per["kendall_c"].append(stats.kendalltau(x, column, variant="c").statistic)
        per["spearman"].append(stats.spearmanr(x, column).statistic)
        per["pearson"].append(stats.pearsonr(x, column).statistic)
    return {key: float(np.around(np.mean(values), 4)) * 100 for key, values in per.items()}


def test_the_three_protocols_follow_the_per_rater_protocol_of_evaluate_metrics(published_release):
    campaign = benchmark_campaign(24)
    run = finished_run(published_release)
    calls: list = []  # type: ignore[type-arg]
    result = rigel_benchmark_evaluate(
        runs=[run],
        campaign=campaign,
        protocols=["reference-free", "1-ref", "all-refs"],
        metrics=["bleu4", "cider"],
        scorer_factory=lambda _run: StandInScorer(calls),
    )
    # each protocol scored every candidate once, in its own prompt setting
    assert calls == [(24, True), (24, False), (24, False)]
    assert result["protocol_order"] == ["reference-free", "1-ref", "all-refs"]
    assert (result["candidates"], result["clips"]) == (24, 4)
    assert result["rater_slots"] == [f"vatex-eval:slot-{n}" for n in (1, 2, 3)]
    assert result["leakage"] == {str(run.pk): {"train": 0, "validation": 0, "test": 0}}

    items = _ordered_items(campaign)
    raters = np.array([r for _, _, r in items], dtype=np.float64)
    for protocol, kept in (("reference-free", 0), ("1-ref", 1), ("all-refs", 9)):
        predicted = np.array(
            [
                StandInScorer.value(text, tuple(refs[:kept]), protocol == "reference-free")
                for text, refs, _ in items
            ]
        )
        row = result["protocols"][protocol]["rows"][f"run:{run.pk}"]
        expected = _scipy_per_rater(predicted, raters)
        for key in KEYS:
            assert row[key] == pytest.approx(expected[key], abs=1e-9), (protocol, key)

    # the standard metrics are evaluate_metrics' own table, with the protocol's references
    for protocol, count in (("1-ref", 1), ("all-refs", None)):
        table, _ = metric_benchmark_compute(
            campaign=campaign, reference_count=count, protocol="emscore", metrics=["bleu4", "cider"]
        )
        for metric in ("bleu4", "cider"):
            assert result["protocols"][protocol]["rows"][metric] == table[metric]
    # reference-free: the n-gram metrics are listed as unavailable, with the reason
    assert result["protocols"]["reference-free"]["rows"]["bleu4"]["unavailable"].startswith(
        "needs references"
    )
    # the run was trained reference-based: the reference-free block says it used the other prompt
    assert "reference-free prompt" in result["protocols"]["reference-free"]["notes"][0]
    # VATEX-EVAL: the paper's three rows are the target beside the run
    assert result["paper"]["vatex_eval"] == {
        "reference-free": {"kendall_b": 42.1, "spearman": 53.7},
        "1-ref": {"kendall_b": 45.6, "spearman": 57.8},
        "all-refs": {"kendall_b": 50.8, "spearman": 64.0},
    }
    text = result_text(result)
    assert "paper: Rigel (Qwen3-VL-2B), Table 2" in text and "[all-refs]" in text


def test_several_runs_share_one_table(published_release):
    campaign = benchmark_campaign(12)
    runs = [finished_run(published_release, ablation=name) for name in ("full", "lm_head")]
    result = rigel_benchmark_evaluate(
        runs=runs,
        campaign=campaign,
        protocols=["1-ref"],
        metrics=["bleu4"],
        scorer_factory=lambda _run: StandInScorer(),
    )
    rows = result["protocols"]["1-ref"]["rows"]
    assert result["protocols"]["1-ref"]["order"] == [
        f"run:{runs[0].pk}",
        f"run:{runs[1].pk}",
        "bleu4",
    ]
    assert set(rows) == {f"run:{runs[0].pk}", f"run:{runs[1].pk}", "bleu4"}
    assert [entry["ablation"] for entry in result["runs"]] == ["full", "lm_head"]


def test_leakage_is_refused_and_the_count_named(published_release):
    """A campaign over the clips of the run's own release: 3 train and 2 validation clips."""
    run = finished_run(published_release)
    campaign = benchmark_campaign(6, frames=False)
    own = list(Clip.objects.filter(vatex_id__in=_release_clip_ids(published_release)))
    assert len(own) == 7
    item = CampaignCandidate.objects.filter(campaign=campaign).first()
    for clip in own:
        candidate = item.candidate
        candidate.pk = None
        candidate.clip = clip
        candidate.external_id = f"leak:{clip.vatex_id}"
        candidate.save()
        CampaignCandidate.objects.create(campaign=campaign, candidate=candidate, clip=clip, quota=3)
    campaign_clips(campaign).update(frames_key="x")
    with pytest.raises(RigelEvaluationError) as caught:
        rigel_benchmark_evaluate(
            runs=[run],
            campaign=campaign,
            protocols=["foil"],
            scorer_factory=lambda _run: StandInScorer(),
        )
    message = str(caught.value)
    assert "leakage" in message and "5 of the" in message
    assert "train (3)" in message and "validation (2)" in message
    with pytest.raises(CommandError, match="5 of the"):
        call_command(
            "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
            "--protocol", "foil", "--json", stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip


def _release_clip_ids(release) -> set[str]:  # type: ignore[no-untyped-def]
    return {row["clip_id"] for rows in release.test_records.values() for row in rows}


def test_foil_accuracy_of_a_user_file_for_rigel_and_the_standard_metrics(
    published_release, tmp_path
):
    campaign = benchmark_campaign(12)
    run = finished_run(published_release)
    clips = sorted(campaign_clips(campaign).values_list("vatex_id", flat=True))
    # Hand-made pairs. The stand-in scores 0.01 per word + 0.1 per word found in a reference
    # (+0.003 with references). Pair 1: the caption has more reference words -> right. Pair 2:
    # the foil is longer with the same overlap -> wrong. Pair 3: identical scores -> a tie, wrong.
    lines = [
        {"clip": clips[0], "caption": "a man plays guitar", "foil": "a man plays xylophone",
         "references": ["a man plays guitar on stage"]},
        {"clip": clips[1], "caption": "a dog", "foil": "a dog dog dog", "references": ["a dog"]},
        {"clip": clips[1], "caption": "one two", "foil": "two one", "references": ["zzz"]},
    ]  # fmt: skip
    foil_file = tmp_path / "foils.jsonl"
    foil_file.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = rigel_benchmark_evaluate(
        runs=[run],
        campaign=campaign,
        protocols=["foil"],
        metrics=["bleu1"],
        foil_lines=foil_file.read_text().splitlines(),
        scorer_factory=lambda _run: StandInScorer(),
    )
    foil = result["foil"]
    assert (foil["source"], foil["pairs"]) == ("file", 3)
    # Reference-based: pair 1 right, pair 2 wrong, pair 3 a tie (wrong). Reference-free the
    # stand-in sees no reference word: pair 1 ties (4 words each), pair 2 and 3 as above.
    rows = {s: foil["settings"][s]["rows"][f"run:{run.pk}"]["accuracy"] for s in foil["settings"]}
    assert rows["reference-based"] == pytest.approx(100 / 3, abs=1e-3)
    assert rows["reference-free"] == 0.0
    # BLEU-1 against the references: pair 1's caption matches every word, its foil misses one
    # -> right; pair 2's caption is "a dog" exactly, the foil repeats "dog" (clipped counts,
    # precision 2/4) -> right; pair 3 has no overlap at all, both score 0 -> a tie, wrong
    bleu = foil["settings"]["reference-based"]["rows"]["bleu1"]["accuracy"]
    assert bleu == pytest.approx(200 / 3, abs=1e-3)
    assert foil["settings"]["reference-free"]["rows"]["bleu1"]["unavailable"].startswith(
        "needs references"
    )
    assert [swap["foil"] for swap in foil["swaps"]] == [line["foil"] for line in lines]


def test_generated_foils_through_the_command(published_release):
    campaign = benchmark_campaign(24)
    run = finished_run(published_release)
    from training_bridge.services import rigel_benchmark

    original = rigel_benchmark._scorer_for
    rigel_benchmark._scorer_for = lambda _run: StandInScorer()  # type: ignore[assignment]
    try:
        outputs = []
        for _ in range(2):
            out = io.StringIO()
            call_command(
                "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
                "--protocol", "foil", "--foil-seed", "7", "--metrics", "bleu4", "--json",
                stdout=out, stderr=io.StringIO(),
            )  # fmt: skip
            outputs.append(json.loads(out.getvalue()))
    finally:
        rigel_benchmark._scorer_for = original  # type: ignore[assignment]
    first, second = outputs
    assert first["foil"]["swaps"] == second["foil"]["swaps"]  # deterministic
    swaps = first["foil"]["swaps"]
    assert first["foil"]["seed"] == 7 and len(swaps) == first["foil"]["pairs"] >= 1
    for swap in swaps:
        references = list(
            ReferenceCaption.objects.filter(clip__vatex_id=swap["clip_id"])
            .order_by("position")
            .values_list("text", flat=True)
        )
        assert swap["caption"] == references[0]
        assert swap["references"] == len(references) - 1
        assert swap["original"] in swap["caption"].lower().split()
        assert swap["replacement"] in swap["foil"].lower().split()
        assert all(swap["replacement"] not in ref.lower().split() for ref in references)
    settings = first["foil"]["settings"]
    assert {f"run:{run.pk}", "bleu4"} <= set(settings["reference-based"]["rows"])
