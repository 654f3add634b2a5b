"""Correlation of the standard metrics with human scores on one evaluation set ("metric
benchmarking without training"), as a table {metric: {kendall_b, kendall_c, spearman, pearson}}
with values x100.

Two protocols:

- "default": each metric's per-candidate scores against the aggregate human score of each candidate
  (e.g. the `overall` of a campaign or release), unrounded;
- "emscore": the VATEX-EVAL protocol of the EMScore paper — metric scores rounded to 4 decimals,
  each correlation computed against every rater column separately and averaged
  (`correlation.rater_averaged_correlations`).

In both, `reference_count` keeps the first n references of every candidate (None: all of them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from training_bridge.metrics.correlation import correlations, rater_averaged_correlations
from training_bridge.metrics.meteor import MeteorScorer
from training_bridge.metrics.standard import (
    DEFAULT_METRICS,
    metric_unavailable_reasons,
    standard_metric_scores,
)

Protocol = Literal["default", "emscore"]
PROTOCOLS: tuple[Protocol, ...] = ("default", "emscore")
CORRELATION_KEYS = ("kendall_b", "kendall_c", "spearman", "pearson")


@dataclass(frozen=True)
class BenchmarkSet:
    """Candidates with their references and human scores.

    `human[i]` is the aggregate human score of candidate i; `rater_scores[i, j]` (optional) is the
    score rater slot j gave candidate i, for protocols that correlate per rater.
    """

    candidates: list[str]
    references: list[list[str]]
    human: np.ndarray
    rater_scores: np.ndarray | None = None
    rater_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        count = len(self.candidates)
        if len(self.references) != count or np.asarray(self.human).shape != (count,):
            raise ValueError("candidates, references and human scores must have the same length")
        if self.rater_scores is not None and np.asarray(self.rater_scores).shape[0] != count:
            raise ValueError("rater_scores must have one row per candidate")


def first_references(references: Sequence[Sequence[str]], count: int | None) -> list[list[str]]:
    """The first `count` references of every candidate (all of them when `count` is None)."""
    if count is not None and count < 1:
        raise ValueError("at least one reference is needed")
    return [list(group if count is None else group[:count]) for group in references]


def unavailable_row(reason: str) -> dict[str, float | str | None]:
    """The table row of a metric that cannot run here: no numbers, and why."""
    return {**{key: None for key in CORRELATION_KEYS}, "unavailable": reason}


def correlation_table(
    benchmark: BenchmarkSet,
    *,
    reference_count: int | None = None,
    protocol: Protocol = "default",
    metrics: Sequence[str] = DEFAULT_METRICS,
    meteor_jar: str | os.PathLike[str] | None = None,
    meteor_scorer: MeteorScorer | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, float | str | None]]:
    """{metric: {kendall_b, kendall_c, spearman, pearson}} x100 for the requested metrics.

    A metric that cannot run here (METEOR without Java) gets `unavailable_row(reason)`.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    if protocol == "emscore" and benchmark.rater_scores is None:
        raise ValueError("the emscore protocol needs per-rater scores")
    if len(benchmark.candidates) < 2:
        raise ValueError("at least two candidates with human scores are needed")
    references = first_references(benchmark.references, reference_count)
    reasons = (
        {}
        if meteor_scorer is not None
        else metric_unavailable_reasons(metrics, meteor_jar=meteor_jar)
    )
    scores = standard_metric_scores(
        benchmark.candidates,
        references,
        metrics=[metric for metric in metrics if metric not in reasons],
        meteor_jar=meteor_jar,
        meteor_scorer=meteor_scorer,
        progress=progress,
    )
    table: dict[str, dict[str, float | str | None]] = {}
    for metric in dict.fromkeys(metrics):
        if metric in reasons:
            table[metric] = unavailable_row(reasons[metric])
            continue
        if protocol == "emscore":
            assert benchmark.rater_scores is not None
            values = rater_averaged_correlations(scores[metric], benchmark.rater_scores)
        else:
            values = correlations(scores[metric], benchmark.human)
        table[metric] = {key: _percent(values[key]) for key in CORRELATION_KEYS}
    return table


def _percent(value: float) -> float | None:
    # NaN (a constant score column) becomes null in JSON rather than a fake number.
    if value != value:
        return None
    return float(round(value * 100, 10))
