"""`evaluate_rigel`: finished training runs scored on an imported benchmark campaign (e.g.
VATEX-EVAL) the way the paper reports them (Table 2), with the standard metrics in the same table.

- Correlation protocols ``reference-free``, ``1-ref``, ``all-refs`` (`rigel.benchmark`): every
  candidate of the campaign scored by each run; the correlations are computed by
  `training_bridge.metrics.benchmark.correlation_row` on the campaign's `BenchmarkSet` (the one
  `evaluate_metrics` builds), so Rigel's row and the standard metrics' rows come from the same code:
  with ``correlation="emscore"`` (the default) the per-rater protocol of the EMScore paper (scores
  rounded to 4 decimals, Kendall tau_b / tau_c, Spearman and Pearson against each imported rater
  slot, averaged), with ``"default"`` against each candidate's aggregate score.
- ``foil``: ActivityNet-FOIL as published (`rigel.foil`): a user's FOIL file, normally the
  paragraph file `convert_activitynet_foil` writes (each sentence scored on its segment clip, a
  paragraph's score the mean of its sentences', a video right when its correct paragraph scores
  strictly higher), or plain pairs; for each run and each standard metric, reference-free and
  reference-based. The paper's ActivityNet-FOIL accuracies stand beside a converted
  ActivityNet-FOIL file only.
- ``noun-swap``: Lepus's own benchmark, foils generated from the campaign's references (one noun
  swapped), scored the same way pair by pair, with no published figure beside it.

A model per protocol: a run is scored only under the protocols of the setting it was trained in
(reference-free runs under ``reference-free`` and FOIL's reference-free setting, reference-based
runs under ``1-ref``, ``all-refs`` and FOIL's reference-based setting), as the paper gives each
setting its own prompt and model (Section 3: R empty in the reference-free setting; Appendix G, one
prompt per setting). A protocol that no given run was trained for is refused, naming the runs and
the way out (`train --reference-free`); ``allow_protocol_mismatch`` scores every run under every
protocol anyway and labels each mismatched row, note and the result (``protocol_mismatch``).

Leakage is refused: a benchmark clip in a run's train or validation split (the data it was trained
and selected on) fails the evaluation, naming how many. torch is imported only inside the
functions that score (web processes create jobs; a `training` worker runs them).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.models import Campaign, CampaignCandidate
from common import storage
from common.jobs import job_claim, job_finish, job_progress, json_safe
from common.models import JobStatus
from common.tasks import enqueue
from datasets_app.models import Clip, ReferenceCaption
from training_bridge.metrics.benchmark import (
    PROTOCOL_FRAMES,
    BenchmarkSet,
    correlation_row,
    correlation_table,
)
from training_bridge.metrics.plugins import (
    METRIC_NAMES,
    TABLE_METRICS,
    MetricItem,
    available_metrics,
    parse_settings,
    score_metrics,
)
from training_bridge.models import RigelEvaluation, TrainingRun
from training_bridge.rigel.benchmark import (
    ALL_REFS,
    FOIL,
    ONE_REF,
    PAPER_FOIL_ACCURACY,
    PAPER_VATEX_EVAL,
    PROTOCOLS,
    REFERENCE_FREE,
    BenchmarkClip,
)
from training_bridge.rigel.foil import ACTIVITYNET_FOIL, NOUN_SWAP
from training_bridge.services.metric_benchmark import (
    MetricBenchmarkError,
    _clip_videos,
    campaign_benchmark_set,
    emscore_protocol_notes,
)

logger = logging.getLogger(__name__)

# The task (training_bridge/tasks.py) imports this module, so it is sent by its name.
RIGEL_EVALUATION_TASK = "training_bridge.tasks.rigel_evaluation"
PROTOCOL_CHOICES = (*PROTOCOLS, FOIL, NOUN_SWAP)
FOIL_PROTOCOLS = (FOIL, NOUN_SWAP)  # the two foil benchmarks; one of them per evaluation
FOIL_BENCHMARK_LABELS = {
    ACTIVITYNET_FOIL: "ActivityNet-FOIL (paragraph protocol, as published)",
    NOUN_SWAP: "Lepus noun-swap foils (our own benchmark; no published figure)",
    "pairs": "FOIL pairs of a user's file",
    "paragraphs": "FOIL paragraphs of a user's file",
}
PAPER_FOIL_SOURCE = (
    "Rigel paper (seed 000), Table 2, ActivityNet-FOIL column, 'Ours' (Qwen3-VL-2B); the target, "
    "not a figure this repository reproduced"
)
CORRELATIONS = ("emscore", "default")
FOIL_SETTINGS = (REFERENCE_FREE, "reference-based")
VATEX_EVAL_SLUG = "vatex-eval"
MAX_RUNS = 8
# The reference count each correlation protocol gives the standard metrics (None: all).
REFERENCE_COUNT = {ONE_REF: 1, ALL_REFS: None}

Progress = Callable[[float, str], None]


class RigelEvaluationError(ValueError):
    """The evaluation cannot be done as asked (explained in the message)."""


# --- inputs -----------------------------------------------------------------------------------


def parse_protocols(values: Sequence[str] | str | None) -> list[str]:
    """Protocol names (repeated or comma-separated) in the table's order; default: the three
    correlation protocols."""
    if values is None or values == []:
        return list(PROTOCOLS)
    if isinstance(values, str):
        values = [values]
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    unknown = [name for name in names if name not in PROTOCOL_CHOICES]
    if unknown or not names:
        raise RigelEvaluationError(
            f"unknown protocol(s) {', '.join(unknown) or '(none)'}; "
            f"known: {', '.join(PROTOCOL_CHOICES)}"
        )
    return [name for name in PROTOCOL_CHOICES if name in names]


def check_foil_inputs(protocols: Sequence[str], *, has_file: bool, error: type[Exception]) -> None:
    """One foil benchmark per evaluation; `foil` (ActivityNet-FOIL as published) scores a file,
    `noun-swap` generates its own pairs."""
    if FOIL in protocols and NOUN_SWAP in protocols:
        raise error("choose one foil benchmark per evaluation: foil or noun-swap")
    if FOIL in protocols and not has_file:
        raise error(
            "the foil protocol scores ActivityNet-FOIL as published and needs its file: convert "
            "the official files with `manage.py convert_activitynet_foil` and pass "
            "activitynet_foil.jsonl (or a file of your own pairs); foils generated from the "
            "campaign are the noun-swap protocol"
        )
    if has_file and FOIL not in protocols:
        raise error("a FOIL file needs the foil protocol")


def runs_for(run_ids: Sequence[int]) -> list[TrainingRun]:
    """The runs, in the order given; each must have finished with success."""
    ids = list(dict.fromkeys(int(value) for value in run_ids))
    if not ids:
        raise RigelEvaluationError("give at least one training run")
    if len(ids) > MAX_RUNS:
        raise RigelEvaluationError(f"at most {MAX_RUNS} runs in one table")
    found = {
        run.pk: run for run in TrainingRun.objects.select_related("release").filter(pk__in=ids)
    }
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise RigelEvaluationError(f"no training run {', '.join(missing)}")
    unfinished = [f"{pk} ({found[pk].status})" for pk in ids if not found[pk].can_score]
    if unfinished:
        raise RigelEvaluationError(
            f"only succeeded runs can be evaluated; not finished: {', '.join(unfinished)}"
        )
    return [found[pk] for pk in ids]


def run_label(run: TrainingRun) -> str:
    return f"Rigel run {run.pk} ({run.ablation})"


REFERENCE_BASED = "reference-based"


def run_setting(run: TrainingRun) -> str:
    """The prompt setting a run was trained in (teacher pass, Phase 1 and Phase 2 alike)."""
    return REFERENCE_FREE if run.reference_free else REFERENCE_BASED


def protocol_setting(protocol: str) -> str:
    """The prompt setting a protocol (or FOIL setting) scores with."""
    return REFERENCE_FREE if protocol == REFERENCE_FREE else REFERENCE_BASED


def foil_key(setting: str) -> str:
    """FOIL's setting as the protocol plan names it ("foil reference-free")."""
    return f"foil {setting}"


def default_protocols(runs: Sequence[TrainingRun]) -> list[str]:
    """The correlation protocols of the runs' own settings, in the table's order."""
    settings = {run_setting(run) for run in runs}
    return [name for name in PROTOCOLS if protocol_setting(name) in settings]


@dataclass
class ProtocolPlan:
    """Which run is scored under which protocol (and FOIL setting)."""

    scored: dict[str, list[int]]  # protocol or FOIL setting -> run ids scored under it
    mismatches: list[dict[str, Any]]  # scored although trained in the other setting
    skipped: list[dict[str, Any]]  # not scored: trained in the other setting

    def runs_for(self, name: str) -> list[int]:
        return self.scored.get(name, [])


def protocol_plan(
    runs: Sequence[TrainingRun], protocols: Sequence[str], *, allow_mismatch: bool = False
) -> ProtocolPlan:
    """Pair each run with the protocols of its own setting; refuse a correlation protocol that no
    run was trained for, unless `allow_mismatch` (then every run is scored under every protocol
    and the mismatched pairs are listed)."""
    # (name in the plan, prompt setting): the correlation protocols, then FOIL's two settings
    names = [(name, protocol_setting(name)) for name in protocols if name not in FOIL_PROTOCOLS]
    if any(name in FOIL_PROTOCOLS for name in protocols):
        names += [(foil_key(setting), setting) for setting in FOIL_SETTINGS]
    scored: dict[str, list[int]] = {}
    mismatches: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for name, setting in names:
        for run in runs:
            trained = run_setting(run)
            pair = {"run": run.pk, "trained": trained, "protocol": name}
            if trained == setting:
                scored.setdefault(name, []).append(run.pk)
            elif allow_mismatch:
                scored.setdefault(name, []).append(run.pk)
                mismatches.append(pair)
            else:
                skipped.append(pair)
    # FOIL scores each run in its own setting: every run serves one of the two
    unserved = [name for name, _ in names if name in PROTOCOLS and not scored.get(name)]
    if unserved:
        trained = ", ".join(f"run {run.pk} {run_setting(run)}" for run in runs)
        raise RigelEvaluationError(
            "protocol mismatch: no run was trained in the setting of "
            + ", ".join(f"{name} ({protocol_setting(name)})" for name in unserved)
            + f" ({trained}). The paper scores each setting with a model trained on its own "
            "prompt: train one with `manage.py train --reference-free` (or without it for 1-ref "
            "and all-refs) and evaluate that run, or score these runs anyway with `manage.py "
            "evaluate_rigel --allow-protocol-mismatch` (its output then labels every mismatched "
            "row)."
        )
    return ProtocolPlan(scored=scored, mismatches=mismatches, skipped=skipped)


def mismatch_text(pair: Mapping[str, Any]) -> str:
    return (
        f"PROTOCOL MISMATCH: run {pair['run']} was trained {pair['trained']} and is scored here "
        f"under {pair['protocol']}; not comparable with the paper's row for this protocol"
    )


@dataclass
class CampaignData:
    """A campaign's candidates (correlation protocols) and clips (FOIL)."""

    benchmark: BenchmarkSet | None  # None when only FOIL was asked
    clips: list[BenchmarkClip]  # one per candidate of `benchmark`
    clip_references: dict[str, list[str]]  # clip id -> references in position order
    clip_media: dict[str, BenchmarkClip]
    corpus: list[str]  # every caption of the campaign (FOIL's nouns)
    clip_pks: dict[str, int]  # clip id -> Clip row id


def campaign_data(
    *, campaign: Campaign, correlation: str, need_benchmark: bool, frames: int = 8
) -> CampaignData:
    rows = list(
        CampaignCandidate.objects.filter(campaign=campaign, is_control=False, dropped=False)
        .order_by("clip_id", "candidate__position", "id")
        .values_list("id", "clip_id", "candidate__text")
    )
    if not rows:
        raise RigelEvaluationError(f"campaign {campaign.slug} has no candidates")
    clip_of = {row_id: clip_pk for row_id, clip_pk, _ in rows}
    clip_rows = {clip.pk: clip for clip in Clip.objects.filter(pk__in=set(clip_of.values()))}
    references: dict[str, list[str]] = {clip.vatex_id: [] for clip in clip_rows.values()}
    for clip_pk, text in (
        ReferenceCaption.objects.filter(clip_id__in=clip_rows)
        .order_by("clip_id", "position")
        .values_list("clip_id", "text")
    ):
        references[clip_rows[clip_pk].vatex_id].append(text)
    media = {
        clip.vatex_id: BenchmarkClip(
            clip_id=clip.vatex_id,
            frames_key=clip.frames_key or "",
            video_key=clip.video_key or "",
            duration=clip.duration,
            modality=clip.modality,
            image_key=clip.image_key or "",
        )
        for clip in clip_rows.values()
    }
    benchmark = None
    clips: list[BenchmarkClip] = []
    if need_benchmark:
        try:
            benchmark = campaign_benchmark_set(
                campaign=campaign, with_raters=correlation == "emscore", frames=frames
            )
        except MetricBenchmarkError as error:
            hint = (
                " (or evaluate against each candidate's aggregate score: --correlation default)"
                if correlation == "emscore"
                else ""
            )
            raise RigelEvaluationError(f"{error}{hint}") from error
        clips = [media[clip_rows[clip_of[key]].vatex_id] for key in benchmark.keys]
    corpus = [text for _, _, text in rows] + [t for refs in references.values() for t in refs]
    clip_pks = {clip.vatex_id: clip.pk for clip in clip_rows.values()}
    return CampaignData(benchmark, clips, references, media, corpus, clip_pks)


def check_media(clips: Sequence[BenchmarkClip]) -> None:
    missing = sorted(
        {
            clip.clip_id
            for clip in clips
            if not (clip.frames_key or clip.video_key or clip.image_key)
        }
    )
    if missing:
        raise RigelEvaluationError(
            f"{len(missing)} benchmark clip(s) have no processed video or frames (e.g. "
            f"{', '.join(missing[:3])}); ingest their videos first"
        )


def run_leakage(*, run: TrainingRun, clip_ids: set[str]) -> dict[str, int]:
    """How many of these clips are in each split of the run's release."""
    from training_bridge.rigel.data import available_splits, read_split
    from training_bridge.services.runs import training_run_spec
    from training_bridge.store import DjangoStore

    store = DjangoStore()
    prefix = training_run_spec(run=run).release_prefix
    counts = {}
    for split in available_splits(store, prefix):
        in_split = {record.clip_id for record in read_split(store, prefix, split)}
        counts[split] = len(in_split & clip_ids)
    return counts


def refuse_leakage(runs: Sequence[TrainingRun], clip_ids: set[str]) -> dict[str, dict[str, int]]:
    """Per run, the benchmark clips in each split of its release; raises when any is in train or
    validation (a test-split overlap is fine: that is what the test split is for)."""
    leakage = {}
    problems = []
    for run in runs:
        counts = run_leakage(run=run, clip_ids=clip_ids)
        leakage[str(run.pk)] = counts
        seen = counts.get("train", 0) + counts.get("validation", 0)
        if seen:
            problems.append(
                f"run {run.pk}: {seen} of the {len(clip_ids)} benchmark clips are in its release's "
                f"train ({counts.get('train', 0)}) or validation ({counts.get('validation', 0)}) "
                "split"
            )
    if problems:
        raise RigelEvaluationError(
            "leakage: " + "; ".join(problems) + ". A run is evaluated only on clips it was neither "
            "trained nor selected on."
        )
    return leakage


# --- evaluation -------------------------------------------------------------------------------


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
    """The evaluation table (JSON-safe); see the module docstring. `protocols` None or empty:
    those of the runs' own settings."""
    from training_bridge.rigel.foil import FoilFormatError, generate_foils, parse_foil_file

    started = time.perf_counter()
    report = progress or (lambda fraction, message: None)
    if correlation not in CORRELATIONS:
        raise RigelEvaluationError(f"correlation must be one of {', '.join(CORRELATIONS)}")
    protocols = parse_protocols(list(protocols)) if protocols else default_protocols(runs)
    correlating = [name for name in protocols if name not in FOIL_PROTOCOLS]
    check_foil_inputs(protocols, has_file=foil_lines is not None, error=RigelEvaluationError)
    # Before any work: a protocol no run was trained for is refused here.
    plan = protocol_plan(runs, protocols, allow_mismatch=allow_protocol_mismatch)
    # The standard metrics see the frames evaluate_metrics gives them under the same protocol
    # (10 under the EMScore authors' protocol, as they ran it; `--set frames=N` overrides).
    frames = (
        parse_settings(settings).frames
        if "frames" in (settings or {})
        else PROTOCOL_FRAMES["emscore" if correlation == "emscore" else "default"]
    )
    settings = {**(settings or {}), "frames": str(frames)}
    data = campaign_data(
        campaign=campaign, correlation=correlation, need_benchmark=bool(correlating), frames=frames
    )
    foil_set = None
    if any(name in FOIL_PROTOCOLS for name in protocols):
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
    used_clips = {clip.clip_id for clip in data.clips}
    if foil_set is not None:
        used_clips |= {pair.clip_id for pair in foil_set.pairs}
    check_media([data.clip_media[clip_id] for clip_id in sorted(used_clips)])
    # Every clip of the campaign counts, scored or not: the benchmark is the campaign.
    leakage = refuse_leakage(runs, set(data.clip_media))

    labels = {f"run:{run.pk}": run_label(run) for run in runs}
    result: dict[str, Any] = {
        "campaign": campaign.slug,
        "correlation": correlation,
        "protocols": {},
        "runs": [
            {
                "key": f"run:{run.pk}",
                "run": run.pk,
                "label": labels[f"run:{run.pk}"],
                "ablation": run.ablation,
                "release": run.release_id,
                "trained_reference_free": run.reference_free,
                "trained_setting": run_setting(run),
                "preset": _run_preset(run),
                "backbone": run.backbone,
            }
            for run in runs
        ],
        "labels": labels,
        "leakage": leakage,
        # Which run each protocol was scored with; a mismatched pair is only ever scored when
        # asked for, and then listed here (and flagged on its row and in its block's notes).
        "protocol_runs": plan.scored,
        "protocol_mismatch_allowed": bool(allow_protocol_mismatch),
        "protocol_mismatch": plan.mismatches,
        "protocol_skipped": plan.skipped,
    }
    benchmark = data.benchmark
    if benchmark is not None:
        result["candidates"] = len(benchmark.candidates)
        result["clips"] = len({clip.clip_id for clip in data.clips})
        result["rater_slots"] = list(benchmark.rater_names)
    if campaign.slug == VATEX_EVAL_SLUG:
        result["paper"] = {
            "source": "Rigel paper (seed 000), Table 2, 'Ours' (Qwen3-VL-2B); the target, not a "
            "figure this repository reproduced",
            "vatex_eval": {
                name: {"kendall_b": tau, "spearman": rho}
                for name, (tau, rho) in PAPER_VATEX_EVAL.items()
                if name in correlating
            },
        }

    # The other metrics (lexical and learned plug-ins): the same table code as evaluate_metrics;
    # reference-free, the candidates carry no reference (a metric that needs them says so).
    if benchmark is not None:
        for name in correlating:
            block: dict[str, Any] = {"rows": {}, "notes": []}
            result["protocols"][name] = block
            report(0.0, f"other metrics, {name}")
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
                            emscore_protocol_notes(
                                parse_settings(settings).emscore_idf_corpus, frames
                            )
                        )

    # Rigel, run by run (one model in memory at a time).
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
    foil_scores: dict[str, dict[str, dict[str, list[float]]]] = {
        setting: {"caption": {}, "foil": {}} for setting in FOIL_SETTINGS
    }
    for run in runs:
        key = f"run:{run.pk}"
        report(base[0] / max(1, work), f"loading run {run.pk}")
        scorer = (scorer_factory or _scorer_for)(run)

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
                _score_foils(scorer, data, foil_set, key, foil_scores, on_progress, foil_settings)
                base[0] += 2 * len(foil_set.pairs) * len(foil_settings)
        finally:
            scorer.close()
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

    if foil_set is not None:
        result["foil"] = _foil_result(foil_set, foil_scores, metrics, settings, data, plan)
    result["seconds"] = round(time.perf_counter() - started, 3)
    report(1.0, "finished")
    return result


def _score_foils(
    scorer: Any,
    data: CampaignData,
    foil_set: Any,
    key: str,
    foil_scores: dict[str, dict[str, dict[str, list[float]]]],
    on_progress: Callable[[int, int], None],
    foil_settings: Sequence[str] = FOIL_SETTINGS,
) -> None:
    from training_bridge.rigel.benchmark import benchmark_record

    pairs = foil_set.pairs
    total = 2 * len(pairs) * len(foil_settings)
    step = 0
    for setting in foil_settings:
        free = setting == REFERENCE_FREE
        chosen, _ = foil_units(foil_set, free=free)
        for which in ("caption", "foil"):
            records = [
                benchmark_record(
                    data.clip_media[pair.clip_id],
                    pair.caption if which == "caption" else pair.foil,
                    () if free else pair.references,
                    str(index),
                )
                for index, pair in enumerate(chosen)
            ]
            scores = scorer.score(records, reference_free=free) if records else []
            foil_scores[setting][which][key] = [float(value) for value in scores]
            step += len(pairs)
            on_progress(step, total)


def foil_units(foil_set: Any, *, free: bool) -> tuple[list[Any], list[Any]]:
    """The pairs a FOIL setting scores, and its paragraphs re-indexed over them. Reference-free:
    every pair. Reference-based: the pairs with a reference, and of a paragraph benchmark the
    videos all of whose sentences have one (a paragraph is scored whole or not at all)."""
    from training_bridge.rigel.foil import Paragraph

    if free:
        return list(foil_set.pairs), list(foil_set.paragraphs)
    if not foil_set.paragraphs:
        return [pair for pair in foil_set.pairs if pair.references], []
    chosen: list[Any] = []
    paragraphs = []
    for paragraph in foil_set.paragraphs:
        sentences = foil_set.pairs[paragraph.first : paragraph.last]
        if all(pair.references for pair in sentences):
            paragraphs.append(Paragraph(paragraph.video, len(chosen), len(chosen) + len(sentences)))
            chosen.extend(sentences)
    return chosen, paragraphs


def foil_set_accuracy(captions: Any, foils: Any, paragraphs: Sequence[Any]) -> float | None:
    """Per video for a paragraph benchmark, per pair otherwise (`rigel.foil`)."""
    from training_bridge.rigel.foil import foil_accuracy, paragraph_accuracy

    if paragraphs:
        return paragraph_accuracy(captions, foils, paragraphs)
    return foil_accuracy(captions, foils)


def _foil_result(
    foil_set: Any,
    foil_scores: dict[str, dict[str, dict[str, list[float]]]],
    metrics: Sequence[str],
    settings: Mapping[str, str] | None,
    data: CampaignData,
    plan: ProtocolPlan,
) -> dict[str, Any]:
    pairs = foil_set.pairs
    videos = _clip_videos(
        [data.clip_pks[pair.clip_id] for pair in pairs], frames=parse_settings(settings).frames
    )
    wanted = list(dict.fromkeys(metrics))
    available, reasons = available_metrics(settings, wanted)
    table: dict[str, Any] = {}
    for setting in FOIL_SETTINGS:
        free = setting == REFERENCE_FREE
        chosen, paragraphs = foil_units(foil_set, free=free)
        captions, foils = foil_scores[setting]["caption"], foil_scores[setting]["foil"]
        rows: dict[str, Any] = {
            name: {"accuracy": foil_set_accuracy(captions[name], foils[name], paragraphs)}
            for name in captions
        }
        notes = []
        # captions and foils in one call (one METEOR start; CIDEr's document frequencies are
        # unchanged by listing every reference set twice)
        items = [
            MetricItem(
                text,
                () if free else tuple(pair.references),
                videos.get(data.clip_pks[pair.clip_id]),
            )
            for text, pair in [(p.caption, p) for p in chosen] + [(p.foil, p) for p in chosen]
        ]
        scores, failed = score_metrics(available, items) if chosen else ({}, {})
        count = len(chosen)
        for metric in wanted:
            why = reasons.get(metric) or failed.get(metric)
            if why or metric not in scores:
                rows[metric] = {"accuracy": None, "unavailable": why or "no pair to score"}
            else:
                values = scores[metric]
                rows[metric] = {
                    "accuracy": foil_set_accuracy(values[:count], values[count:], paragraphs)
                }
        for pair in plan.mismatches:
            if pair["protocol"] == foil_key(setting):
                rows[f"run:{pair['run']}"]["protocol_mismatch"] = pair["trained"]
                notes.append(mismatch_text(pair))
        for pair in plan.skipped:
            if pair["protocol"] == foil_key(setting):
                notes.append(
                    f"run {pair['run']} was trained {pair['trained']}: not scored in this setting"
                )
        if not free and len(chosen) < len(pairs):
            notes.append(
                f"{len(foil_set.paragraphs) - len(paragraphs)} video(s) with a sentence without "
                "a reference are scored reference-free only"
                if foil_set.paragraphs
                else f"{len(pairs) - len(chosen)} pair(s) without another reference are scored "
                "reference-free only"
            )
        if paragraphs:
            notes.append(
                f"{len(paragraphs)} videos: each sentence scored on its segment, a paragraph's "
                "score the mean of its sentences', a video right when its correct paragraph "
                "scores strictly higher than its foil paragraph"
            )
        table[setting] = {
            "videos": len(paragraphs) if paragraphs else None,
            "published": (
                {"accuracy": PAPER_FOIL_ACCURACY[setting], "source": PAPER_FOIL_SOURCE}
                if foil_set.benchmark == ACTIVITYNET_FOIL
                else None
            ),
            "pairs": len(chosen),
            "rows": rows,
            "order": list(rows),
            "notes": notes,
        }
    return {
        "benchmark": foil_set.benchmark,
        "benchmark_label": FOIL_BENCHMARK_LABELS.get(foil_set.benchmark, foil_set.benchmark),
        "source": foil_set.source,
        "seed": foil_set.seed,
        "pairs": len(pairs),
        "videos": len(foil_set.paragraphs) or None,
        "skipped_clips": foil_set.skipped,
        "corpus_nouns": foil_set.corpus_nouns,
        "rule": (
            "a video is right when its correct paragraph (the mean of its sentences' scores) "
            "scores strictly higher than its foil paragraph"
            if foil_set.paragraphs
            else "right when the correct caption scores strictly higher than its foil"
        ),
        "settings": table,
        "swaps": [pair.swap() for pair in pairs],
    }


# --- the job ----------------------------------------------------------------------------------


FOIL_MAX_BYTES = 20 * 1024 * 1024


@transaction.atomic
def rigel_evaluation_create(
    *,
    run_ids: Sequence[int],
    campaign: Campaign,
    protocols: Sequence[str] | str | None = None,
    correlation: str = "emscore",
    foil_seed: int = 0,
    foil_file: bytes | None = None,
    metrics: Sequence[str] | None = None,
    created_by: Any = None,
) -> RigelEvaluation:
    """Record an evaluation job and enqueue it on the training queue (after commit). Inputs are
    checked here; the leakage check needs the releases' files and runs in the job."""
    try:
        runs = runs_for(run_ids)
        names = parse_protocols(protocols) if protocols else default_protocols(runs)
        protocol_plan(runs, names)  # the job scores no run under another setting's protocol
    except RigelEvaluationError as error:
        raise ValidationError(str(error)) from error
    if correlation not in CORRELATIONS:
        raise ValidationError(f"correlation must be one of {', '.join(CORRELATIONS)}")
    if not -(2**63) <= int(foil_seed) < 2**63:
        raise ValidationError("foil_seed must fit in 64 bits")
    chosen_metrics = list(dict.fromkeys(metrics)) if metrics is not None else list(TABLE_METRICS)
    unknown = [name for name in chosen_metrics if name not in METRIC_NAMES]
    if unknown:
        raise ValidationError(f"unknown metric(s) {', '.join(unknown)}")
    check_foil_inputs(names, has_file=foil_file is not None, error=ValidationError)
    if foil_file is not None and len(foil_file) > FOIL_MAX_BYTES:
        raise ValidationError(f"the FOIL file is larger than {FOIL_MAX_BYTES} bytes")
    evaluation = RigelEvaluation.objects.create(
        runs=[run.pk for run in runs],
        campaign=campaign,
        protocols=names,
        correlation=correlation,
        foil_seed=int(foil_seed),
        metrics=chosen_metrics,
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    if foil_file is not None:
        key = f"training/evaluations/{evaluation.pk}/foil.jsonl"
        storage.put_bytes(key, foil_file)
        evaluation.foil_key = key
        evaluation.save(update_fields=["foil_key"])
    enqueue(RIGEL_EVALUATION_TASK, evaluation.pk)
    return evaluation


def rigel_evaluation_execute(*, evaluation_id: int, task_id: str = "") -> str:
    """The Celery task's body: claim, evaluate with progress, finish."""
    from common.jobs import JobCancelled
    from training_bridge.services.reporting import heartbeat

    evaluation = job_claim(model=RigelEvaluation, job_id=evaluation_id, task_id=task_id)
    if evaluation is None:
        return "busy"

    def progress(fraction: float, message: str) -> None:
        job_progress(job=evaluation, fraction=fraction, message=message)

    try:
        with heartbeat(RigelEvaluation, evaluation.pk):
            foil_lines = None
            if evaluation.foil_key:
                foil_lines = storage.read_bytes(evaluation.foil_key).decode("utf-8").splitlines()
            result = rigel_benchmark_evaluate(
                runs=runs_for(evaluation.runs),
                campaign=Campaign.objects.get(pk=evaluation.campaign_id),
                protocols=evaluation.protocols,
                correlation=evaluation.correlation,
                foil_seed=evaluation.foil_seed,
                foil_lines=foil_lines,
                metrics=evaluation.metrics or TABLE_METRICS,
                progress=_throttled(progress),
            )
    except JobCancelled:
        job_finish(job=evaluation, status=JobStatus.CANCELLED, progress_message="cancelled")
        return "cancelled"
    except Exception as error:  # the job ends failed with the reason; the worker lives on
        logger.exception("Rigel evaluation %s failed", evaluation_id)
        job_finish(job=evaluation, status=JobStatus.FAILED, error=str(error))
        return "failed"
    job_finish(
        job=evaluation, status=JobStatus.SUCCEEDED, result=json_safe(result), progress_message=""
    )
    return "ok"


def _throttled(progress: Progress, interval: float = 1.0) -> Progress:
    last = [0.0]

    def report(fraction: float, message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= interval or fraction >= 1.0:
            last[0] = now
            progress(fraction, message)

    return report


# --- presentation -----------------------------------------------------------------------------

STATISTIC_LABELS = (
    ("kendall_b", "tau_b"),
    ("spearman", "rho"),
    ("kendall_c", "tau_c"),
    ("pearson", "Pearson"),
)


def result_tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The correlation blocks as rows for a page or a text table: one block per protocol, the
    runs first, then the standard metrics, then the paper's figure (VATEX-EVAL)."""
    labels = result.get("labels", {})
    paper = (result.get("paper") or {}).get("vatex_eval", {})
    tables = []
    blocks = result.get("protocols") or {}
    for protocol in result.get("protocol_order") or list(blocks):
        block = blocks[protocol]
        rows = []
        for name in block.get("order") or list(block.get("rows", {})):
            row = block["rows"][name]
            label = labels.get(name, name)
            if row.get("protocol_mismatch"):
                label += f" [MISMATCH: trained {row['protocol_mismatch']}]"
            rows.append(
                {
                    "key": name,
                    "label": label,
                    "values": [row.get(key) for key, _ in STATISTIC_LABELS],
                    "unavailable": row.get("unavailable"),
                }
            )
        if protocol in paper:
            rows.append(
                {
                    "key": "paper",
                    "label": "paper: Rigel (Qwen3-VL-2B), Table 2",
                    "values": [paper[protocol].get(key) for key, _ in STATISTIC_LABELS],
                    "unavailable": None,
                }
            )
        tables.append({"protocol": protocol, "rows": rows, "notes": block.get("notes", [])})
    return tables


def foil_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """FOIL accuracy: one row per metric, one column per setting."""
    foil = result.get("foil")
    if not foil:
        return []
    labels = result.get("labels", {})
    names: list[str] = []
    for setting in FOIL_SETTINGS:
        block = foil["settings"].get(setting, {})
        for name in block.get("order") or list(block.get("rows", {})):
            if name not in names:
                names.append(name)
    rows = []
    for name in names:
        cells = []
        for setting in FOIL_SETTINGS:
            row = foil["settings"].get(setting, {}).get("rows", {}).get(name, {})
            cells.append(row.get("accuracy"))
        rows.append({"key": name, "label": labels.get(name, name), "values": cells})
    published = [
        (foil["settings"].get(setting, {}).get("published") or {}).get("accuracy")
        for setting in FOIL_SETTINGS
    ]
    if any(value is not None for value in published):
        rows.append(
            {
                "key": "paper",
                "label": "Rigel paper, Table 2 (published)",
                "values": published,
                "published": True,
            }
        )
    return rows


def result_text(result: dict[str, Any]) -> str:
    """The evaluation as plain text (the command's output without --json)."""

    def cell(value: Any) -> str:
        return f"{value:>8.2f}" if isinstance(value, (int, float)) else f"{'n/a':>8}"

    lines = [
        f"campaign {result['campaign']}: {result.get('candidates', '-')} candidates on "
        f"{result.get('clips', '-')} clips; correlation {result['correlation']}"
        + (
            f" over rater slots {', '.join(result['rater_slots'])}"
            if result.get("rater_slots")
            else ""
        )
    ]
    if result.get("protocol_mismatch"):
        lines.append(
            f"PROTOCOL MISMATCH ALLOWED: {len(result['protocol_mismatch'])} run/protocol pair(s) "
            "scored with a run trained in the other setting (marked [MISMATCH]); those rows are "
            "not comparable with the paper's"
        )
    header = f"{'metric':<34}" + "".join(f"{label:>8}" for _, label in STATISTIC_LABELS)
    for table in result_tables(result):
        lines += ["", f"[{table['protocol']}]  (x100)", header]
        for row in table["rows"]:
            if row["unavailable"]:
                lines.append(f"{row['label']:<34}  unavailable: {row['unavailable']}")
            else:
                lines.append(f"{row['label']:<34}" + "".join(cell(v) for v in row["values"]))
        lines += [f"  note: {note}" for note in table["notes"]]
    foil = result.get("foil")
    if foil:
        lines += [
            "",
            f"[{foil.get('benchmark_label', 'foil')}]  accuracy %, "
            + (f"{foil['videos']} videos, " if foil.get("videos") else "")
            + f"{foil['pairs']} pairs ({foil['source']}"
            + (f", seed {foil['seed']}" if foil.get("seed") is not None else "")
            + ")",
            f"{'metric':<34}" + "".join(f"{s:>16}" for s in FOIL_SETTINGS),
        ]
        for row in foil_rows(result):
            lines.append(
                f"{row['label']:<34}"
                + "".join(
                    f"{v:>16.2f}" if isinstance(v, (int, float)) else f"{'n/a':>16}"
                    for v in row["values"]
                )
            )
        for setting in FOIL_SETTINGS:
            lines += [f"  note: {note}" for note in foil["settings"][setting]["notes"]]
    lines.append(f"({result.get('seconds', 0):.1f} s)")
    return "\n".join(lines)
