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
    """Table 2 as the paper reports it: the reference-free row by a reference-free run, the 1-ref
    and all-refs rows by a reference-based one."""
    campaign = benchmark_campaign(24)
    free = finished_run(published_release, reference_free=True)
    run = finished_run(published_release)
    calls: dict[int, list] = {free.pk: [], run.pk: []}  # type: ignore[type-arg]
    result = rigel_benchmark_evaluate(
        runs=[free, run],
        campaign=campaign,
        protocols=["reference-free", "1-ref", "all-refs"],
        metrics=["bleu4", "cider"],
        scorer_factory=lambda each: StandInScorer(calls[each.pk]),
    )
    # each protocol scored every candidate once, in its own prompt setting, by its own run
    assert calls == {free.pk: [(24, True)], run.pk: [(24, False), (24, False)]}
    assert result["protocol_runs"] == {
        "reference-free": [free.pk],
        "1-ref": [run.pk],
        "all-refs": [run.pk],
    }
    assert (result["protocol_mismatch"], result["protocol_mismatch_allowed"]) == ([], False)
    assert [entry["trained_setting"] for entry in result["runs"]] == [
        "reference-free",
        "reference-based",
    ]
    assert result["protocol_order"] == ["reference-free", "1-ref", "all-refs"]
    assert (result["candidates"], result["clips"]) == (24, 4)
    assert result["rater_slots"] == [f"vatex-eval:slot-{n}" for n in (1, 2, 3)]
    assert result["leakage"] == {
        str(pk): {"train": 0, "validation": 0, "test": 0} for pk in (free.pk, run.pk)
    }

    items = _ordered_items(campaign)
    raters = np.array([r for _, _, r in items], dtype=np.float64)
    for protocol, kept in (("reference-free", 0), ("1-ref", 1), ("all-refs", 9)):
        predicted = np.array(
            [
                StandInScorer.value(text, tuple(refs[:kept]), protocol == "reference-free")
                for text, refs, _ in items
            ]
        )
        scored = free if protocol == "reference-free" else run
        other = run if protocol == "reference-free" else free
        rows = result["protocols"][protocol]["rows"]
        assert f"run:{other.pk}" not in rows
        row = rows[f"run:{scored.pk}"]
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
    # each block says which run it did not score, and why
    assert result["protocols"]["reference-free"]["notes"] == [
        f"run {run.pk} was trained reference-based: not scored under reference-free (each "
        "protocol is scored with a run trained in its setting)"
    ]
    assert result["protocols"]["1-ref"]["notes"] == [
        f"run {free.pk} was trained reference-free: not scored under 1-ref (each protocol is "
        "scored with a run trained in its setting)"
    ]
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
            protocols=["noun-swap"],
            scorer_factory=lambda _run: StandInScorer(),
        )
    message = str(caught.value)
    assert "leakage" in message and "5 of the" in message
    assert "train (3)" in message and "validation (2)" in message
    with pytest.raises(CommandError, match="5 of the"):
        call_command(
            "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
            "--protocol", "noun-swap", "--json", stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip


def _release_clip_ids(release) -> set[str]:  # type: ignore[no-untyped-def]
    return {row["clip_id"] for rows in release.test_records.values() for row in rows}


def test_foil_accuracy_of_a_user_file_for_rigel_and_the_standard_metrics(
    published_release, tmp_path
):
    campaign = benchmark_campaign(12)
    free = finished_run(published_release, reference_free=True)
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
        runs=[free, run],
        campaign=campaign,
        protocols=["foil"],
        metrics=["bleu1"],
        foil_lines=foil_file.read_text().splitlines(),
        scorer_factory=lambda _run: StandInScorer(),
    )
    foil = result["foil"]
    assert (foil["source"], foil["pairs"], foil["benchmark"]) == ("file", 3, "pairs")
    # a user's pairs are not ActivityNet-FOIL: no published figure beside them
    assert all(block["published"] is None for block in foil["settings"].values())
    # Reference-based: pair 1 right, pair 2 wrong, pair 3 a tie (wrong). Reference-free the
    # stand-in sees no reference word: pair 1 ties (4 words each), pair 2 and 3 as above.
    # Each setting is scored by the run trained in it, the other run is named in a note.
    settings = foil["settings"]
    assert f"run:{free.pk}" not in settings["reference-based"]["rows"]
    assert f"run:{run.pk}" not in settings["reference-free"]["rows"]
    assert settings["reference-free"]["notes"] == [
        f"run {run.pk} was trained reference-based: not scored in this setting"
    ]
    assert settings["reference-based"]["rows"][f"run:{run.pk}"]["accuracy"] == pytest.approx(
        100 / 3, abs=1e-3
    )
    assert settings["reference-free"]["rows"][f"run:{free.pk}"]["accuracy"] == 0.0
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
    from training_bridge.services.rigel_benchmark import evaluation

    original = evaluation._scorer_for
    evaluation._scorer_for = lambda _run: StandInScorer()  # type: ignore[assignment]
    try:
        outputs = []
        for _ in range(2):
            out = io.StringIO()
            call_command(
                "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
                "--protocol", "noun-swap", "--foil-seed", "7", "--metrics", "bleu4", "--json",
                stdout=out, stderr=io.StringIO(),
            )  # fmt: skip
            outputs.append(json.loads(out.getvalue()))
    finally:
        evaluation._scorer_for = original  # type: ignore[assignment]
    first, second = outputs
    assert first["foil"]["swaps"] == second["foil"]["swaps"]  # deterministic
    swaps = first["foil"]["swaps"]
    assert first["foil"]["seed"] == 7 and len(swaps) == first["foil"]["pairs"] >= 1
    # our own benchmark, labelled so, with no published figure anywhere in the output
    assert first["foil"]["benchmark"] == "noun-swap"
    assert "our own benchmark" in first["foil"]["benchmark_label"]
    assert "96.2" not in json.dumps(first) and "97.1" not in json.dumps(first)
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


def test_a_protocol_no_run_was_trained_for_is_refused_before_any_scoring(published_release):
    campaign = benchmark_campaign(12)
    run = finished_run(published_release)  # reference-based
    calls: list = []  # type: ignore[type-arg]
    with pytest.raises(RigelEvaluationError) as caught:
        rigel_benchmark_evaluate(
            runs=[run],
            campaign=campaign,
            protocols=["reference-free", "1-ref"],
            metrics=["bleu4"],
            scorer_factory=lambda _run: StandInScorer(calls),
        )
    message = str(caught.value)
    assert message.startswith(
        "protocol mismatch: no run was trained in the setting of reference-free "
        f"(reference-free) (run {run.pk} reference-based)."
    )
    assert "manage.py train --reference-free" in message
    assert "--allow-protocol-mismatch" in message
    assert calls == []  # nothing was scored
    # the command exits with the message (non-zero), and prints no table
    out = io.StringIO()
    with pytest.raises(CommandError, match="protocol mismatch: no run was trained"):
        call_command(
            "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
            "--protocol", "reference-free", "--json", stdout=out, stderr=io.StringIO(),
        )  # fmt: skip
    assert out.getvalue() == ""
    # the job is refused at creation: no evaluation row, nothing queued
    from django.core.exceptions import ValidationError

    from training_bridge.models import RigelEvaluation
    from training_bridge.services.rigel_benchmark import rigel_evaluation_create

    with pytest.raises(ValidationError, match="protocol mismatch"):
        rigel_evaluation_create(run_ids=[run.pk], campaign=campaign, protocols=["reference-free"])
    assert not RigelEvaluation.objects.exists()


def test_an_allowed_mismatch_is_scored_and_labelled_loudly(published_release):
    campaign = benchmark_campaign(12)
    run = finished_run(published_release)  # reference-based
    from training_bridge.services.rigel_benchmark import evaluation

    original = evaluation._scorer_for
    evaluation._scorer_for = lambda _run: StandInScorer()  # type: ignore[assignment]
    try:
        out = io.StringIO()
        call_command(
            "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
            "--protocol", "reference-free,1-ref", "--metrics", "bleu4",
            "--allow-protocol-mismatch", "--json", stdout=out, stderr=io.StringIO(),
        )  # fmt: skip
        result = json.loads(out.getvalue())
        text_out = io.StringIO()
        call_command(
            "evaluate_rigel", "--run", str(run.pk), "--campaign", campaign.slug,
            "--protocol", "reference-free", "--metrics", "bleu4",
            "--allow-protocol-mismatch", stdout=text_out, stderr=io.StringIO(),
        )  # fmt: skip
    finally:
        evaluation._scorer_for = original  # type: ignore[assignment]
    assert result["protocol_mismatch_allowed"] is True
    assert result["protocol_mismatch"] == [
        {"run": run.pk, "trained": "reference-based", "protocol": "reference-free"}
    ]
    key = f"run:{run.pk}"
    assert result["protocols"]["reference-free"]["rows"][key]["protocol_mismatch"] == (
        "reference-based"
    )
    assert "protocol_mismatch" not in result["protocols"]["1-ref"]["rows"][key]
    assert result["protocols"]["reference-free"]["notes"] == [
        f"PROTOCOL MISMATCH: run {run.pk} was trained reference-based and is scored here under "
        "reference-free; not comparable with the paper's row for this protocol"
    ]
    text = text_out.getvalue()
    assert "PROTOCOL MISMATCH ALLOWED: 1 run/protocol pair(s)" in text
    assert f"Rigel run {run.pk} (full) [MISMATCH: trained reference-based]" in text


def test_without_a_protocol_each_run_gets_those_of_its_own_setting(published_release):
    campaign = benchmark_campaign(12)
    free = finished_run(published_release, reference_free=True)
    based = finished_run(published_release)
    for run, expected in ((free, ["reference-free"]), (based, ["1-ref", "all-refs"])):
        result = rigel_benchmark_evaluate(
            runs=[run],
            campaign=campaign,
            protocols=None,
            metrics=["bleu4"],
            scorer_factory=lambda _run: StandInScorer(),
        )
        assert result["protocol_order"] == expected
        assert result["protocol_mismatch"] == []


def test_the_preset_is_set_by_train_and_checked_by_evaluate_rigel_and_score(
    published_release, tmp_path
):
    from training_bridge.models import TrainingRun
    from training_bridge.rigel.config import PRESETS
    from training_bridge.services.rigel_benchmark import evaluation

    out = io.StringIO()
    call_command(
        "train", "--release", str(published_release.pk), "--backbone", "tiny",
        "--preset", "paper-budget", "--set", "phase1_epochs=2", "--json",
        stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    created = TrainingRun.objects.get(pk=json.loads(out.getvalue())["run"])
    stored = created.hyperparameters
    assert (stored["frames"], stored["frame_pixels"], stored["phase1_epochs"]) == (2, 9216, 2)

    campaign = benchmark_campaign(12)
    budget = finished_run(published_release, hyperparameters=dict(PRESETS["paper-budget"]))
    plain = finished_run(published_release)
    original = evaluation._scorer_for
    evaluation._scorer_for = lambda _run: StandInScorer()  # type: ignore[assignment]
    try:
        out = io.StringIO()
        call_command(
            "evaluate_rigel", "--run", str(budget.pk), "--campaign", campaign.slug,
            "--preset", "paper-budget", "--metrics", "bleu4", "--json",
            stdout=out, stderr=io.StringIO(),
        )  # fmt: skip
        assert [entry["preset"] for entry in json.loads(out.getvalue())["runs"]] == ["paper-budget"]
        with pytest.raises(
            CommandError, match=rf"--preset paper-budget: run {plain.pk} \(default\)"
        ):
            call_command(
                "evaluate_rigel", "--runs", f"{budget.pk},{plain.pk}", "--campaign",
                campaign.slug, "--preset", "paper-budget", "--json",
                stdout=io.StringIO(), stderr=io.StringIO(),
            )  # fmt: skip
    finally:
        evaluation._scorer_for = original  # type: ignore[assignment]
    triples = tmp_path / "triples.jsonl"
    triples.write_text(json.dumps({"video": "nowhere", "references": ["a"], "candidate": "b"}))
    with pytest.raises(CommandError, match=rf"run {budget.pk} \(paper-budget\) trained with"):
        call_command(
            "score", "--run", str(budget.pk), "--input", str(triples), "--preset", "default",
            stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
