"""Intra-rater consistency from test-retest repeats (no Django).

A repeat pair is a worker's first rating of a candidate and their second, unannounced rating of
the same candidate later in the session. Per worker and question, and pooled for the campaign,
consistency is Cohen's quadratic-weighted kappa between first and second ratings:

    kappa_w = 1 - sum_ij w_ij O_ij / sum_ij w_ij E_ij,   w_ij = (i - j)^2 / (K - 1)^2

with O the observed joint distribution of (first, second) and E the product of its marginals
(what two independent ratings with the same rating habits would give). 1 is perfect
reproduction, 0 is chance, below 0 worse than chance; a worker who always gives the same rating
has no spread to reproduce and gets no kappa (undefined, not 1). The exact-agreement share and
the mean absolute difference are reported beside it, since kappa over a handful of pairs is
noisy. Everything is a few `np.bincount` calls over the pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass
class RepeatConsistency:
    """Per worker (NaN where undefined) and pooled over every pair."""

    pairs: NDArray[np.int64]
    kappa: NDArray[np.float64]
    exact_agreement: NDArray[np.float64]
    mean_absolute_difference: NDArray[np.float64]
    pooled_pairs: int
    pooled_kappa: float
    pooled_exact_agreement: float


def _kappa_from_tables(tables: NDArray[np.float64], categories: int) -> NDArray[np.float64]:
    """Quadratic-weighted kappa of each (first x second) contingency table in `tables`."""
    levels = np.arange(categories, dtype=np.float64)
    weights = (levels[:, None] - levels[None, :]) ** 2 / max(categories - 1, 1) ** 2
    totals = tables.sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = tables / totals[:, None, None]
        rows = observed.sum(axis=2)
        columns = observed.sum(axis=1)
        expected = rows[:, :, None] * columns[:, None, :]
        disagreement_expected = (weights[None] * expected).sum(axis=(1, 2))
        disagreement_observed = (weights[None] * observed).sum(axis=(1, 2))
        kappa = 1.0 - disagreement_observed / disagreement_expected
    kappa[~(disagreement_expected > 1e-12)] = np.nan
    return kappa


def repeat_consistency(
    *,
    worker: NDArray[np.int64],
    first: NDArray[np.int64],
    second: NDArray[np.int64],
    workers: int,
    categories: int = 5,
) -> RepeatConsistency:
    """Consistency of each worker's repeat pairs of one question (ratings 1..categories)."""
    worker = np.asarray(worker, dtype=np.int64)
    first = np.asarray(first, dtype=np.int64)
    second = np.asarray(second, dtype=np.int64)
    if not (len(worker) == len(first) == len(second)):
        raise ValueError("worker, first and second must have the same length")
    if len(first) and (
        min(first.min(), second.min()) < 1 or max(first.max(), second.max()) > categories
    ):
        raise ValueError(f"ratings must lie in 1..{categories}")
    cells = categories * categories
    index = worker * cells + (first - 1) * categories + (second - 1)
    tables = np.bincount(index, minlength=workers * cells).astype(np.float64)
    tables = tables.reshape(workers, categories, categories)
    pairs = np.bincount(worker, minlength=workers).astype(np.int64)
    same = np.bincount(worker, weights=(first == second), minlength=workers)
    difference = np.bincount(worker, weights=np.abs(first - second), minlength=workers)
    with np.errstate(invalid="ignore", divide="ignore"):
        exact = same / pairs
        mean_difference = difference / pairs
    pooled = tables.sum(axis=0, keepdims=True)
    pooled_kappa = float(_kappa_from_tables(pooled, categories)[0]) if len(first) else np.nan
    return RepeatConsistency(
        pairs=pairs,
        kappa=_kappa_from_tables(tables, categories),
        exact_agreement=exact,
        mean_absolute_difference=mean_difference,
        pooled_pairs=int(len(first)),
        pooled_kappa=pooled_kappa,
        pooled_exact_agreement=float((first == second).mean()) if len(first) else float("nan"),
    )
