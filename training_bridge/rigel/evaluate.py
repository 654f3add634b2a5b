"""Evaluation: Rigel's correlation with the human scores, side by side with the standard metrics.

For each evaluated split (test, the run's results, when the release has one; validation, shown
only as the split Phase 1 selected its epoch on) the table holds one row per metric with Kendall
tau_b and tau_c, Spearman and Pearson against the human normalised scores, x100 as caption-metric papers print them. The standard metrics (BLEU-4, ROUGE-L, CIDEr, METEOR
where its runtime exists) come from `training_bridge.metrics`, computed on the same candidates
with all of their references.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from training_bridge.metrics.correlation import correlations
from training_bridge.rigel.config import STANDARD_METRICS

STATISTICS = ("kendall_b", "kendall_c", "spearman", "pearson")
METRIC_LABELS = {
    "rigel": "Rigel",
    "bleu4": "BLEU-4",
    "rougeL": "ROUGE-L",
    "cider": "CIDEr",
    "meteor": "METEOR",
}


def correlation_row(predicted: Sequence[float] | np.ndarray, human: np.ndarray) -> dict[str, float]:
    """The four statistics x100 (NaN when undefined, e.g. a constant score)."""
    values = correlations(np.asarray(predicted, dtype=np.float64), human)
    return {name: _times_hundred(values[name]) for name in STATISTICS}


def _times_hundred(value: float) -> float:
    return float("nan") if value is None or math.isnan(value) else round(100.0 * value, 4)


def standard_metric_scores(
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    metrics: Sequence[str] = STANDARD_METRICS,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Scores of the standard metrics for these candidates (all references of each), through the
    metric registry (`training_bridge.metrics.plugins`), and notes about what could not be
    computed here: METEOR without its Java runtime, and every learned baseline (CLIP-S, EMScore,
    L-CLIPScore...) with the reason — this table gives them no video frames."""
    from training_bridge.metrics.plugins import (
        CLIP_METRIC_NAMES,
        LABELS,
        LCLIP_METRIC_NAMES,
        MetricItem,
        available_metrics,
        score_metrics,
    )

    learned = [m for m in (*CLIP_METRIC_NAMES, *LCLIP_METRIC_NAMES) if m not in metrics]
    try:
        available, reasons = available_metrics(None, [*metrics, *learned])
        items = [
            MetricItem(text, tuple(group))
            for text, group in zip(candidates, references, strict=True)
        ]
        scores, failed = score_metrics(available, items)
    except Exception as error:  # a metric's failure must not sink the whole evaluation
        return {}, [f"standard metrics failed: {error}"]
    reasons.update(failed)
    notes = [
        f"{METRIC_LABELS.get(name) or LABELS.get(name, name)} not computed: {reasons[name]}"
        for name in [*metrics, *learned]
        if name in reasons
    ]
    return {name: np.asarray(values, dtype=np.float64) for name, values in scores.items()}, notes


def evaluate_split(
    *,
    rigel_scores: np.ndarray,
    human: np.ndarray,
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    standard_metrics: Sequence[str] = STANDARD_METRICS,
) -> dict[str, Any]:
    """{"n": count, "rows": {metric: {statistic: x100}}, "notes": [...]} for one split."""
    rows: dict[str, dict[str, float]] = {"rigel": correlation_row(rigel_scores, human)}
    notes: list[str] = []
    if standard_metrics:
        with_references = [i for i, refs in enumerate(references) if refs]
        if len(with_references) >= 2:
            scores, notes = standard_metric_scores(
                [candidates[i] for i in with_references],
                [references[i] for i in with_references],
                standard_metrics,
            )
            for name, values in scores.items():
                rows[name] = correlation_row(values, human[with_references])
            if len(with_references) < len(candidates):
                notes.append(
                    f"standard metrics on the {len(with_references)} candidates with references"
                )
        else:
            notes.append("standard metrics need references")
    return {"n": int(len(human)), "rows": rows, "notes": notes}


def table_markdown(table: dict[str, Any]) -> str:
    """The evaluation table as Markdown (one block per split, the test split first)."""
    lines: list[str] = [f"_{note}_\n" for note in table.get("notes", [])]
    for split, block in table.get("splits", {}).items():
        role = block.get("role")
        title = {"result": "results", "model selection": "used for model selection"}.get(role or "")
        lines.append(f"### {split} (n = {block['n']})" + (f" — {title}" if title else ""))
        lines.append("")
        lines.append("| metric | Kendall tau_b | Kendall tau_c | Spearman | Pearson |")
        lines.append("|---|---:|---:|---:|---:|")
        for name, row in block["rows"].items():
            cells = " | ".join(_cell(row.get(s)) for s in STATISTICS)
            lines.append(f"| {METRIC_LABELS.get(name, name)} | {cells} |")
        for note in block.get("notes", []):
            lines.append(f"\n_{note}_")
        lines.append("")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.1f}"
