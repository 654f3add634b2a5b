"""Finished Rigel runs scored on an image benchmark (`evaluate_rigel --image-benchmark`).

The benchmark is a generic image JSONL (``training_bridge.rigel.image_benchmarks``; the converters
write it from Flickr8K-Expert, Flickr8K-CF, Composite and Nebula's published files) and a folder of
its images, read from disk without importing them. Every image is one frame (T = 1) through the
image path; each protocol (``reference-free``, ``all-refs``) is scored with runs trained in its
setting (the rule of `rigel_benchmark.plan.protocol_plan`, mismatches refused or labelled), and the
result gives Kendall tau_b and tau_c (x100) as the paper reports them, beside the paper's own row
for the benchmark, protocol and method variant where the paper prints one (Table 1 for the full
method; Tables 3 and 5, run reference-free, for the ablations).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training_bridge.models import TrainingRun
from training_bridge.rigel.benchmark import REFERENCE_FREE
from training_bridge.services.rigel_benchmark.campaign import refuse_leakage
from training_bridge.services.rigel_benchmark.plan import (
    Progress,
    ProtocolPair,
    RigelEvaluationError,
    RunIdentity,
    evaluation_header,
    mismatch_text,
    protocol_plan,
    run_identity,
    run_setting,
)


def image_protocols(values: Sequence[str] | None, runs: Sequence[TrainingRun]) -> list[str]:
    """The asked protocols (reference-free, all-refs), or those of the runs' own settings."""
    from training_bridge.rigel.benchmark import ALL_REFS, REFERENCE_FREE
    from training_bridge.rigel.image_benchmarks import IMAGE_PROTOCOLS

    if not values:
        settings = {run_setting(run) for run in runs}
        own = {REFERENCE_FREE: REFERENCE_FREE, "reference-based": ALL_REFS}
        return [name for name in IMAGE_PROTOCOLS if name in {own[s] for s in settings}]
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    unknown = [name for name in names if name not in IMAGE_PROTOCOLS]
    if unknown:
        raise RigelEvaluationError(
            f"unknown image protocol(s) {', '.join(unknown)}; known: {', '.join(IMAGE_PROTOCOLS)}"
        )
    return [name for name in IMAGE_PROTOCOLS if name in names]


def paper_variant(run: TrainingRun) -> str:
    """The paper's row a run stands for: its ablation, or Table 3 (iv) for a Qwen2.5-VL backbone."""
    backbone = str(run.backbone).lower().replace("_", ".")
    if run.ablation == "full" and "qwen2.5-vl" in backbone:
        return "qwen2_5_vl"
    return str(run.ablation)


def _image_scorer(run: TrainingRun, images: Path) -> Any:
    """A `ProtocolScorer` over the run's trained model, reading pictures from `images`."""
    from training_bridge.rigel.benchmark import ProtocolScorer
    from training_bridge.rigel.data import ExampleLoader
    from training_bridge.rigel.pipeline import load_run_model
    from training_bridge.rigel.store import LocalStore
    from training_bridge.services.runs import training_run_config, training_run_spec
    from training_bridge.store import DjangoStore

    config = training_run_config(run=run)
    model = load_run_model(
        spec=training_run_spec(run=run), store=DjangoStore(), results=run.step_results
    )
    loader = ExampleLoader(LocalStore(images), frames=config.frames, lazy=model.engine is not None)
    return ProtocolScorer(model, config, loader)


def rigel_image_benchmark_evaluate(
    *,
    runs: Sequence[TrainingRun],
    benchmark: str,
    lines: Sequence[str],
    images: Path,
    protocols: Sequence[str] | None = None,
    scale: Sequence[float] | None = None,
    file_name: str = "the file",
    allow_protocol_mismatch: bool = False,
    progress: Progress | None = None,
    scorer_factory: Callable[[TrainingRun, Path], Any] | None = None,
) -> dict[str, Any]:
    """The image benchmark's table (JSON-safe): per protocol and run, Kendall tau_b / tau_c x100
    and the points correlated, the paper's row where it prints one, and every candidate's score
    (in file order) so that the figures can be recomputed."""
    from training_bridge.rigel.image_benchmarks import IMAGE_BENCHMARKS, flat_candidates

    report = progress or (lambda fraction, message: None)
    spec = IMAGE_BENCHMARKS.get(benchmark)
    if spec is None:
        raise RigelEvaluationError(
            f"unknown image benchmark {benchmark!r}; known: {', '.join(IMAGE_BENCHMARKS)}"
        )
    chosen = image_protocols(protocols, runs)
    plan = protocol_plan(runs, chosen, allow_mismatch=allow_protocol_mismatch)
    items = _benchmark_items(lines, images, scale=scale, file_name=file_name)
    leakage = refuse_leakage(runs, {item.image_id for item in items})
    pairs = flat_candidates(items)
    result: dict[str, Any] = {
        "benchmark": spec.name,
        "title": spec.title,
        "source": spec.source,
        "unit": spec.unit,
        "images": len(items),
        "candidates": len(pairs),
        "protocol_order": chosen,
        "protocols": {},
        **evaluation_header(runs, plan, leakage, allow_protocol_mismatch, _run_entry),
        "scores": {},
        "paper_note": "the paper's rows are the targets a run with real weights trained on "
        "Vid-Lepus and Spica should approach; nothing in this repository reproduced them",
    }
    mismatched = {(pair["run"], pair["protocol"]) for pair in plan.mismatches}
    total = max(1, len(pairs) * sum(len(plan.runs_for(name)) for name in chosen))
    done = 0
    for run in runs:
        names = [name for name in chosen if run.pk in plan.runs_for(name)]
        if not names:
            continue
        key = f"run:{run.pk}"
        scorer = (scorer_factory or _image_scorer)(run, images)
        try:
            for name in names:
                scores = _score_protocol(
                    scorer,
                    pairs,
                    name,
                    report=report,
                    done=done,
                    total=total,
                    label=f"{key} {name}",
                )
                done += len(pairs)
                _add_run_row(
                    result, spec, pairs, scores, run, name, mismatched=(run.pk, name) in mismatched
                )
        finally:
            close = getattr(scorer, "close", None)
            if close is not None:
                close()
    report(1.0, "done")
    return result


def _score_protocol(
    scorer: Any,
    pairs: Sequence[tuple[Any, Any]],
    protocol: str,
    *,
    report: Progress,
    done: int,
    total: int,
    label: str,
) -> Any:
    """The scorer's score of every candidate under `protocol`; the progress counts from `done` of
    `total` candidates over all runs and protocols."""

    def step(count: int, _total: int) -> None:
        report((done + count) / total, f"{label}: {count}/{len(pairs)}")

    return scorer.score(
        _protocol_records(pairs, protocol), reference_free=protocol == REFERENCE_FREE, progress=step
    )


def _benchmark_items(
    lines: Sequence[str], images: Path, *, scale: Sequence[float] | None, file_name: str
) -> list[Any]:
    """The benchmark's items, each image found in `images`."""
    from training_bridge.rigel.image_benchmarks import ImageBenchmarkError, read_image_benchmark

    try:
        items = read_image_benchmark(lines, scale=scale, name=file_name)
    except ImageBenchmarkError as error:
        raise RigelEvaluationError(str(error)) from error
    if not images.is_dir():
        raise RigelEvaluationError(f"no images folder at {images}")
    missing = sorted({item.image for item in items if not (images / item.image).is_file()})
    if missing:
        raise RigelEvaluationError(
            f"{len(missing)} image(s) of the benchmark are not in {images} (e.g. "
            f"{', '.join(missing[:3])})"
        )
    return items


class ImageBenchmarkRun(RunIdentity):
    """A run's entry in an image benchmark's result."""

    paper_variant: str
    trained_setting: str
    backbone: str


def _run_entry(run: TrainingRun) -> ImageBenchmarkRun:
    return ImageBenchmarkRun(
        **run_identity(run),
        paper_variant=paper_variant(run),
        trained_setting=run_setting(run),
        backbone=run.backbone,
    )


def _protocol_records(pairs: Sequence[tuple[Any, Any]], protocol: str) -> list[Any]:
    """Every candidate as one record on its image (T = 1), with the protocol's references."""
    from training_bridge.rigel.benchmark import protocol_references
    from training_bridge.rigel.data import ReleaseRecord
    from training_bridge.rigel.modality import IMAGE

    return [
        ReleaseRecord(
            clip_id=item.image_id,
            candidate_id=str(index),
            text=candidate.caption,
            references=tuple(protocol_references(item.references, protocol)),
            normalized=0.0,
            training_class=1,
            modality=IMAGE,
            image_key=item.image,
        )
        for index, (item, candidate) in enumerate(pairs)
    ]


def _add_run_row(
    result: dict[str, Any],
    spec: Any,
    pairs: Sequence[tuple[Any, Any]],
    scores: Sequence[float],
    run: TrainingRun,
    protocol: str,
    *,
    mismatched: bool,
) -> None:
    """A run's row under a protocol (beside the paper's), its mismatch note and its scores."""
    from training_bridge.rigel.image_benchmarks import benchmark_row, paper_row

    key = f"run:{run.pk}"
    row = benchmark_row(spec, pairs, scores)
    row["protocol_mismatch"] = mismatched
    row["paper"] = paper_row(spec, protocol, paper_variant(run))
    block = result["protocols"].setdefault(protocol, {"rows": {}, "notes": []})
    block["rows"][key] = row
    if row["protocol_mismatch"]:
        block["notes"].append(
            mismatch_text(ProtocolPair(run=run.pk, trained=run_setting(run), protocol=protocol))
        )
    result["scores"].setdefault(key, {})[protocol] = [round(float(value), 6) for value in scores]


def image_result_text(result: dict[str, Any]) -> str:
    """The table for a terminal."""
    lines = [
        f"{result['title']}: {result['images']} images, {result['candidates']} candidates "
        f"(Kendall tau_b / tau_c x100, one point per {result['unit']})"
    ]
    for name in result["protocol_order"]:
        block = result["protocols"].get(name)
        if not block:
            continue
        lines.append(f"  {name}")
        for key, row in block["rows"].items():
            paper = row.get("paper")
            beside = (
                f"   paper {paper['kendall_b']:.1f} / {paper['kendall_c']:.1f} ({paper['where']})"
                if paper
                else "   paper: no row"
            )
            flag = " [MISMATCH]" if row.get("protocol_mismatch") else ""
            lines.append(
                f"    {result['labels'][key]}{flag}: {row['kendall_b']:.1f} / "
                f"{row['kendall_c']:.1f} over {row['points']} points{beside}"
            )
        lines.extend(f"    {note}" for note in block["notes"])
    return "\n".join(lines)
