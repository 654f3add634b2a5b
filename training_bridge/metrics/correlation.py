"""Correlation of metric scores with human scores, as reported in caption-metric papers (×100 is
left to the caller)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats


def correlations(
    predicted: Sequence[float] | np.ndarray, human: Sequence[float] | np.ndarray
) -> dict[str, float]:
    """Kendall tau_b and tau_c, Spearman and Pearson of `predicted` against `human`.

    A constant vector has no defined correlation; it is reported as NaN rather than hidden.
    """
    x = np.asarray(predicted, dtype=np.float64)
    y = np.asarray(human, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("predicted and human must be 1-D vectors of the same length")
    if len(x) < 2:
        raise ValueError("at least two samples are needed")
    return {
        "kendall_b": float(stats.kendalltau(x, y, variant="b").statistic),
        "kendall_c": float(stats.kendalltau(x, y, variant="c").statistic),
        "spearman": float(stats.spearmanr(x, y).statistic),
        "pearson": float(stats.pearsonr(x, y).statistic)
        if np.std(x) > 0 and np.std(y) > 0
        else float("nan"),
    }
