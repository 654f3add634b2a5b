"""Reads of training_bridge: run lists, comparisons, curves for the pages."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from django.db.models import QuerySet

from training_bridge.models import TrainingRun
from training_bridge.rigel.config import RigelConfig, with_stored_layout
from training_bridge.rigel.evaluate import METRIC_LABELS, STATISTICS


class EvaluationTable(TypedDict):
    """One split's block of the run page's evaluation section."""

    split: str
    role: str
    title: str
    rows: list[dict[str, Any]]  # {"metric", "label", statistic: value}, statistics as stored
    notes: list[str]
    n: int | None


class SettingRow(TypedDict):
    name: str
    values: list[Any]  # one per run, as the run stores it
    differs: bool


class MetricRow(TypedDict):
    name: str
    values: list[float | None]


class RunComparison(TypedDict):
    """Runs side by side: their settings, their test-split statistics, the best of each."""

    settings: list[SettingRow]
    metrics: list[MetricRow]
    best: dict[str, float | None]


def training_run_list(
    *, release_id: int | None = None, status: str | None = None
) -> QuerySet[TrainingRun]:
    runs = TrainingRun.objects.select_related("release", "created_by").defer(
        "history", "step_results", "log_tail", "evaluation"
    )
    if release_id is not None:
        runs = runs.filter(release_id=release_id)
    if status:
        runs = runs.filter(status=status)
    return runs.order_by("-created_at", "-id")


def curve(
    history: Iterable[dict[str, Any]], *, phase: str, x: str, y: str
) -> list[tuple[float, float]]:
    """(x, y) points of one curve, skipping points without a finite y."""
    points = []
    for point in history:
        if point.get("phase") != phase:
            continue
        xv, yv = point.get(x), point.get(y)
        if isinstance(xv, (int, float)) and isinstance(yv, (int, float)) and math.isfinite(yv):
            points.append((float(xv), float(yv)))
    return points


def evaluation_rows(run: TrainingRun, *, split: str = "test") -> list[dict[str, Any]]:
    """Rows of the side-by-side table of one split: {"metric", "label", statistic: value}."""
    block = (run.evaluation or {}).get("splits", {}).get(split)
    if not block:
        return []
    rows = []
    for name, values in block.get("rows", {}).items():
        rows.append({"metric": name, "label": METRIC_LABELS.get(name, name), **values})
    return rows


def evaluation_splits(run: TrainingRun) -> list[str]:
    """The evaluated splits, the results (test) first, the model-selection split (validation)
    after."""
    names = list((run.evaluation or {}).get("splits", {}).keys())
    return sorted(names, key=lambda name: (name != "test", name))


SPLIT_TITLES = {
    "result": "Test split — results",
    "model selection": "Validation split — used for model selection, not a result",
}


def evaluation_tables(run: TrainingRun) -> list[EvaluationTable]:
    """The blocks of the run page's evaluation section, each with its title and notes."""
    splits = (run.evaluation or {}).get("splits", {})
    tables: list[EvaluationTable] = []
    for split in evaluation_splits(run):
        block = splits.get(split, {})
        role = block.get("role") or ("result" if split == "test" else "model selection")
        tables.append(
            {
                "split": split,
                "role": role,
                "title": SPLIT_TITLES.get(role, split),
                "rows": evaluation_rows(run, split=split),
                "notes": block.get("notes", []),
                "n": block.get("n"),
            }
        )
    return tables


def training_runs_compare(*, runs: Sequence[TrainingRun]) -> RunComparison:
    """What differs between runs (settings) and their results (test split) side by side."""
    defaults = RigelConfig().to_dict()
    settings_rows: list[SettingRow] = []
    names = sorted({name for run in runs for name in (run.hyperparameters or {})})
    fixed = [
        ("release", lambda run: run.release_id),
        ("backbone", lambda run: run.backbone),
        ("device", lambda run: run.device),
        ("ablation", lambda run: run.ablation),
        ("reference_free", lambda run: run.reference_free),
        ("processes", lambda run: run.processes),
    ]
    for label, getter in fixed:
        values = [getter(run) for run in runs]
        settings_rows.append(
            {"name": label, "values": values, "differs": len(set(map(str, values))) > 1}
        )
    stored = [with_stored_layout(run.hyperparameters or {}) for run in runs]
    for name in names:
        values = [settings.get(name, defaults.get(name)) for settings in stored]
        settings_rows.append(
            {"name": name, "values": values, "differs": len(set(map(str, values))) > 1}
        )
    metric_rows: list[MetricRow] = []
    for statistic in STATISTICS:
        metric_rows.append(
            {"name": statistic, "values": [run.result_metric(statistic) for run in runs]}
        )
    best: dict[str, float | None] = {}
    for row in metric_rows:
        finite = [v for v in row["values"] if isinstance(v, (int, float))]
        best[row["name"]] = max(finite) if finite else None
    return {"settings": settings_rows, "metrics": metric_rows, "best": best}
