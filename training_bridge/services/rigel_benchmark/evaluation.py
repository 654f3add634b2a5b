"""Finished runs scored on a benchmark campaign, beside the standard metrics (the package
docstring tells the protocols)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from annotation.models import Campaign
from training_bridge.metrics.benchmark import (
    PROTOCOL_FRAMES,
    BenchmarkSet,
    correlation_row,
    correlation_table,
)
from training_bridge.metrics.plugins import TABLE_METRICS, parse_settings
from training_bridge.models import TrainingRun
from training_bridge.rigel.benchmark import ALL_REFS, ONE_REF, PAPER_VATEX_EVAL, REFERENCE_FREE
from training_bridge.services.metric_benchmark import emscore_protocol_notes
from training_bridge.services.rigel_benchmark.campaign import (
    CampaignData,
    campaign_data,
    check_media,
    refuse_leakage,
)
from training_bridge.services.rigel_benchmark.foil import FoilScores, foil_result, score_foils
from training_bridge.services.rigel_benchmark.plan import (
    CORRELATIONS,
    FOIL_PROTOCOLS,
    FOIL_SETTINGS,
    Progress,
    ProtocolPlan,
    RigelEvaluationError,
    RunIdentity,
    check_foil_inputs,
    default_protocols,
    evaluation_header,
    foil_key,
    mismatch_text,
    parse_protocols,
    protocol_plan,
    run_identity,
    run_setting,
)

VATEX_EVAL_SLUG = "vatex-eval"
# The reference count each correlation protocol gives the standard metrics (None: all).
REFERENCE_COUNT = {ONE_REF: 1, ALL_REFS: None}


def _scorer_for(run: TrainingRun) -> Any:
    """A `ProtocolScorer` over the run's trained model."""
    from training_bridge.rigel.benchmark import ProtocolScorer
    from training_bridge.rigel.data import ExampleLoader
    from training_bridge.rigel.pipeline import load_run_model
    from training_bridge.services.runs import training_run_config, training_run_spec
    from training_bridge.store import DjangoStore

    config = training_run_config(run=run)
    store = DjangoStore()
    model = load_run_model(spec=training_run_spec(run=run), store=store, results=run.step_results)
    loader = ExampleLoader(store, frames=config.frames, lazy=model.engine is not None)
    return ProtocolScorer(model, config, loader)


def _run_preset(run: TrainingRun) -> str:
    from training_bridge.rigel.config import preset_name
    from training_bridge.services.runs import training_run_config

    return preset_name(training_run_config(run=run))


def rigel_benchmark_evaluate(
    *,
    runs: Sequence[TrainingRun],
    campaign: Campaign,
    protocols: Sequence[str] | None,
    correlation: str = "emscore",
    metrics: Sequence[str] = TABLE_METRICS,
    settings: Mapping[str, str] | None = None,
    foil_seed: int = 0,
    foil_lines: Sequence[str] | None = None,
    progress: Progress | None = None,
    scorer_factory: Callable[[TrainingRun], Any] | None = None,
    allow_protocol_mismatch: bool = False,
) -> dict[str, Any]:
    """The evaluation table (JSON-safe); see the package docstring. `protocols` None or empty:
    those of the runs' own settings."""
    started = time.perf_counter()
    report = progress or (lambda fraction, message: None)
    if correlation not in CORRELATIONS:
        raise RigelEvaluationError(f"correlation must be one of {', '.join(CORRELATIONS)}")
    protocols = parse_protocols(list(protocols)) if protocols else default_protocols(runs)
    correlating = [name for name in protocols if name not in FOIL_PROTOCOLS]
    check_foil_inputs(protocols, has_file=foil_lines is not None, error=RigelEvaluationError)
    # Before any work: a protocol no run was trained for is refused here.
    plan = protocol_plan(runs, protocols, allow_mismatch=allow_protocol_mismatch)
    frames = _standard_frames(settings, correlation)
    settings = {**(settings or {}), "frames": str(frames)}
    data = campaign_data(
        campaign=campaign, correlation=correlation, need_benchmark=bool(correlating), frames=frames
    )
    foil_set = None
    if any(name in FOIL_PROTOCOLS for name in protocols):
        foil_set = _foil_set(campaign, data, foil_lines=foil_lines, foil_seed=foil_seed)
    used_clips = {clip.clip_id for clip in data.clips}
    if foil_set is not None:
        used_clips |= {pair.clip_id for pair in foil_set.pairs}
    check_media([data.clip_media[clip_id] for clip_id in sorted(used_clips)])
    # Every clip of the campaign counts, scored or not: the benchmark is the campaign.
    leakage = refuse_leakage(runs, set(data.clip_media))

    result: dict[str, Any] = {
        "campaign": campaign.slug,
        "correlation": correlation,
        "protocols": {},
        **evaluation_header(runs, plan, leakage, allow_protocol_mismatch, _run_entry),
    }
    result.update(_benchmark_summary(campaign, data, correlating))
    if data.benchmark is not None:
        for name in correlating:
            report(0.0, f"other metrics, {name}")
            result["protocols"][name] = _standard_block(
                data.benchmark, name, correlation, metrics, settings, frames
            )
    scorer_factory = scorer_factory or _scorer_for
    foil_scores = _score_runs(
        runs, plan, data, foil_set, correlating, correlation, result, report, scorer_factory
    )
    _close_correlation_blocks(result, plan, correlating)
    if foil_set is not None:
        result["foil"] = foil_result(foil_set, foil_scores, metrics, settings, data, plan)
    result["seconds"] = round(time.perf_counter() - started, 3)
    report(1.0, "finished")
    return result


def _standard_frames(settings: Mapping[str, str] | None, correlation: str) -> int:
    """The frames the standard metrics see: those evaluate_metrics gives them under the same
    protocol (10 under the EMScore authors' protocol, as they ran it; `--set frames=N` overrides)."""
    if "frames" in (settings or {}):
        return parse_settings(settings).frames
    return PROTOCOL_FRAMES["emscore" if correlation == "emscore" else "default"]


def _foil_set(
    campaign: Campaign, data: CampaignData, *, foil_lines: Sequence[str] | None, foil_seed: int
) -> Any:
    """The user's FOIL file, or foils generated from the campaign's references (noun-swap)."""
    from training_bridge.rigel.foil import FoilFormatError, generate_foils, parse_foil_file

    try:
        foil_set = (
            parse_foil_file(foil_lines, clip_references=data.clip_references)
            if foil_lines is not None
            else generate_foils(data.clip_references, corpus=data.corpus, seed=foil_seed)
        )
    except FoilFormatError as error:
        raise RigelEvaluationError(str(error)) from error
    if not foil_set.pairs:
        raise RigelEvaluationError(
            f"no FOIL pair could be made from campaign {campaign.slug} "
            f"(skipped clips: {foil_set.skipped})"
        )
    return foil_set


class CampaignRun(RunIdentity):
    """A run's entry in a campaign evaluation's result."""

    release: int
    trained_reference_free: bool
    trained_setting: str
    preset: str
    backbone: str


def _run_entry(run: TrainingRun) -> CampaignRun:
    return CampaignRun(
        **run_identity(run),
        release=run.release_id,
        trained_reference_free=run.reference_free,
        trained_setting=run_setting(run),
        preset=_run_preset(run),
        backbone=run.backbone,
    )


def _benchmark_summary(
    campaign: Campaign, data: CampaignData, correlating: Sequence[str]
) -> dict[str, Any]:
    """The candidates, clips and rater slots correlated, and the paper's VATEX-EVAL row."""
    summary: dict[str, Any] = {}
    benchmark = data.benchmark
    if benchmark is not None:
        summary["candidates"] = len(benchmark.candidates)
        summary["clips"] = len({clip.clip_id for clip in data.clips})
        summary["rater_slots"] = list(benchmark.rater_names)
    if campaign.slug == VATEX_EVAL_SLUG:
        summary["paper"] = {
            "source": "Rigel paper (seed 000), Table 2, 'Ours' (Qwen3-VL-2B); the target, not a "
            "figure this repository reproduced",
            "vatex_eval": {
                name: {"kendall_b": tau, "spearman": rho}
                for name, (tau, rho) in PAPER_VATEX_EVAL.items()
                if name in correlating
            },
        }
    return summary


def _standard_block(
    benchmark: BenchmarkSet,
    name: str,
    correlation: str,
    metrics: Sequence[str],
    settings: Mapping[str, str],
    frames: int,
) -> dict[str, Any]:
    """A protocol's block with the other metrics (lexical and learned plug-ins) computed by the
    same table code as evaluate_metrics; reference-free, the candidates carry no reference (a
    metric that needs them says so). Rigel's rows go in front of them (`_score_runs`)."""
    block: dict[str, Any] = {"rows": {}, "notes": []}
    block["standard"] = correlation_table(
        dataclasses.replace(benchmark, references=[[] for _ in benchmark.candidates])
        if name == REFERENCE_FREE
        else benchmark,
        reference_count=REFERENCE_COUNT.get(name),
        protocol="emscore" if correlation == "emscore" else "default",
        metrics=metrics,
        settings=settings,
    )
    if correlation == "emscore":
        for metric in ("emscore", "emscore_ref"):
            row = block["standard"].get(metric)
            if row is not None and not row.get("unavailable"):
                row.update(
                    emscore_protocol_notes(parse_settings(settings).emscore_idf_corpus, frames)
                )
    return block


def _score_runs(
    runs: Sequence[TrainingRun],
    plan: ProtocolPlan,
    data: CampaignData,
    foil_set: Any,
    correlating: Sequence[str],
    correlation: str,
    result: dict[str, Any],
    report: Progress,
    scorer_factory: Callable[[TrainingRun], Any],
) -> FoilScores:
    """Rigel, run by run (one model in memory at a time): its correlation rows go into the
    result's protocol blocks; its FOIL scores are returned."""
    benchmark = data.benchmark

    def run_protocols(run_pk: int) -> list[str]:
        return [name for name in correlating if run_pk in plan.runs_for(name)]

    def run_foil_settings(run_pk: int) -> list[str]:
        return [name for name in FOIL_SETTINGS if run_pk in plan.runs_for(foil_key(name))]

    work = sum(
        (len(benchmark.candidates) * len(run_protocols(run.pk)) if benchmark is not None else 0)
        + (2 * len(foil_set.pairs) * len(run_foil_settings(run.pk)) if foil_set is not None else 0)
        for run in runs
    )
    base = [0]  # samples of the earlier runs and parts, for the progress bar
    foil_scores: FoilScores = {setting: {"caption": {}, "foil": {}} for setting in FOIL_SETTINGS}
    for run in runs:
        key = f"run:{run.pk}"
        report(base[0] / max(1, work), f"loading run {run.pk}")
        scorer = scorer_factory(run)

        def on_progress(done: int, _total: int, run_pk: int = run.pk) -> None:
            report(
                (base[0] + done) / max(1, work), f"run {run_pk}: {base[0] + done}/{work} samples"
            )

        mine = run_protocols(run.pk)
        try:
            if benchmark is not None and mine:
                from training_bridge.rigel.benchmark import score_protocols

                scores = score_protocols(
                    scorer,
                    clips=data.clips,
                    candidates=benchmark.candidates,
                    references=benchmark.references,
                    protocols=mine,
                    progress=on_progress,
                    # On a GPU, one engine pass for every protocol: each clip decoded and through
                    # the vision tower once (docs/benchmarks.md, issue 29 point 2); on CPU the
                    # protocols are scored one after the other, as before.
                    together=True,
                )
                for name in mine:
                    result["protocols"][name]["rows"][key] = correlation_row(
                        scores[name],
                        benchmark,
                        protocol="emscore" if correlation == "emscore" else "default",
                    )
                base[0] += len(benchmark.candidates) * len(mine)
            if foil_set is not None:
                foil_settings = run_foil_settings(run.pk)
                score_foils(scorer, data, foil_set, key, foil_scores, on_progress, foil_settings)
                base[0] += 2 * len(foil_set.pairs) * len(foil_settings)
        finally:
            scorer.close()
    return foil_scores


def _close_correlation_blocks(
    result: dict[str, Any], plan: ProtocolPlan, correlating: Sequence[str]
) -> None:
    """Flag the mismatched rows, note the skipped runs, put the standard metrics' rows after
    Rigel's and record the order."""
    for pair in plan.mismatches:
        if pair["protocol"] in result["protocols"]:
            block = result["protocols"][pair["protocol"]]
            block["rows"][f"run:{pair['run']}"]["protocol_mismatch"] = pair["trained"]
            block["notes"].append(mismatch_text(pair))
    for pair in plan.skipped:
        if pair["protocol"] in result["protocols"]:
            result["protocols"][pair["protocol"]]["notes"].append(
                f"run {pair['run']} was trained {pair['trained']}: not scored under "
                f"{pair['protocol']} (each protocol is scored with a run trained in its setting)"
            )
    for name in correlating:
        block = result["protocols"][name]
        block["rows"].update(block.pop("standard", {}))
        # PostgreSQL's jsonb does not keep key order: the table's order is kept explicitly.
        block["order"] = list(block["rows"])
    result["protocol_order"] = list(result["protocols"])
