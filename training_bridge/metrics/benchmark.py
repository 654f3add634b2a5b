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

The metrics come from the registry of `plugins` (lexical and learned alike): a metric that cannot
run — its runtime or weights missing, or the set lacking the video or references it needs — keeps
its row, with null values and the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from training_bridge.metrics.correlation import correlations, rater_averaged_correlations
from training_bridge.metrics.meteor import MeteorScorer
from training_bridge.metrics.plugins import (
    TABLE_METRICS,
    CaptionMetric,
    MetricItem,
    StandardMetric,
    Video,
    available_metrics,
    score_metrics,
)

Protocol = Literal["default", "emscore"]
# Frames per clip for the video metrics when the `frames` setting is not given: the EMScore
# authors' VATEX-EVAL run keeps 10 per clip (VATEX-EVAL-demo.py of ShiYaya/emscore,
# `use_uniform_sample = 10`); 8 elsewhere (ours: Rigel's default).
PROTOCOL_FRAMES: dict[str, int] = {"default": 8, "emscore": 10}
PROTOCOLS: tuple[Protocol, ...] = ("default", "emscore")
CORRELATION_KEYS = ("kendall_b", "kendall_c", "spearman", "pearson")


@dataclass(frozen=True)
class BenchmarkSet:
    """Candidates with their references and human scores.

    `human[i]` is the aggregate human score of candidate i; `rater_scores[i, j]` (optional) is the
    score rater slot j gave candidate i, for protocols that correlate per rater. `videos[i]`
    (optional) is candidate i's clip, for the metrics that look at the video.
    """

    candidates: list[str]
    references: list[list[str]]
    human: np.ndarray
    rater_scores: np.ndarray | None = None
    rater_names: list[str] = field(default_factory=list)
    videos: list[Video | None] | None = None
    # Optional identity of each row (a campaign's: the CampaignCandidate id), for callers that
    # score the same candidates with something of their own (`evaluate_rigel`).
    keys: list[int] = field(default_factory=list)

    def items(self, reference_count: int | None = None) -> list[MetricItem]:
        """The candidates as metric items, with their first `reference_count` references."""
        references = first_references(self.references, reference_count)
        videos = self.videos or [None] * len(self.candidates)
        return [
            MetricItem(candidate, tuple(group), video)
            for candidate, group, video in zip(self.candidates, references, videos, strict=True)
        ]

    def __post_init__(self) -> None:
        count = len(self.candidates)
        if len(self.references) != count or np.asarray(self.human).shape != (count,):
            raise ValueError("candidates, references and human scores must have the same length")
        if self.rater_scores is not None and np.asarray(self.rater_scores).shape[0] != count:
            raise ValueError("rater_scores must have one row per candidate")
        if self.videos is not None and len(self.videos) != count:
            raise ValueError("videos must have one entry (or None) per candidate")


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
    metrics: Sequence[str] = TABLE_METRICS,
    settings: Mapping[str, str] | None = None,
    meteor_jar: str | os.PathLike[str] | None = None,
    meteor_scorer: MeteorScorer | None = None,
    progress: Callable[[str], None] | None = None,
    scored: Callable[[str, CaptionMetric], None] | None = None,
) -> dict[str, dict[str, float | str | None]]:
    """{metric: {kendall_b, kendall_c, spearman, pearson}} x100 for the requested metrics, in
    order; `settings` go to `plugins.available_metrics` (e.g. {"clip_model": path}).

    A metric that cannot run here gets `unavailable_row(reason)`. `scored(name, metric)` is
    called for every metric that scored the set (a judge keeps its answers in `records`).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    if protocol == "emscore" and benchmark.rater_scores is None:
        raise ValueError("the emscore protocol needs per-rater scores")
    if len(benchmark.candidates) < 2:
        raise ValueError("at least two candidates with human scores are needed")
    wanted = list(dict.fromkeys(metrics))
    merged = dict(settings or {})
    if meteor_jar is not None:
        merged.setdefault("meteor_jar", os.fspath(meteor_jar))
    available, reasons = available_metrics(merged, wanted)
    if meteor_scorer is not None and "meteor" in wanted:
        # A running scorer handed in by the caller needs no runtime check.
        reasons.pop("meteor", None)
        available["meteor"] = StandardMetric("meteor", meteor_scorer=meteor_scorer)
    available = {name: available[name] for name in wanted if name in available}
    scores, failed = score_metrics(available, benchmark.items(reference_count), progress=progress)
    reasons.update(failed)
    if scored is not None:
        for name in scores:
            scored(name, available[name])
    table: dict[str, dict[str, float | str | None]] = {}
    for metric in wanted:
        if metric in reasons:
            table[metric] = unavailable_row(reasons[metric])
            continue
        table[metric] = correlation_row(scores[metric], benchmark, protocol=protocol)
    return table


def correlation_row(
    scores: Sequence[float] | np.ndarray, benchmark: BenchmarkSet, *, protocol: Protocol = "default"
) -> dict[str, float | str | None]:
    """One metric's row {kendall_b, kendall_c, spearman, pearson} x100 under `protocol`; used by
    `correlation_table` and by callers that bring scores of their own (a trained Rigel run)."""
    if protocol == "emscore":
        if benchmark.rater_scores is None:
            raise ValueError("the emscore protocol needs per-rater scores")
        values = rater_averaged_correlations(scores, benchmark.rater_scores)
    else:
        values = correlations(scores, benchmark.human)
    return {key: _percent(values[key]) for key in CORRELATION_KEYS}


def _percent(value: float) -> float | None:
    # NaN (a constant score column) becomes null in JSON rather than a fake number.
    if value != value:
        return None
    return float(round(value * 100, 10))
