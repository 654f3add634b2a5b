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
    if np.std(x) == 0 or np.std(y) == 0:
        # A constant vector has no ranking to correlate with; scipy would warn and return NaN.
        return {key: float("nan") for key in ("kendall_b", "kendall_c", "spearman", "pearson")}
    return {
        "kendall_b": float(stats.kendalltau(x, y, variant="b").statistic),
        "kendall_c": float(stats.kendalltau(x, y, variant="c").statistic),
        "spearman": float(stats.spearmanr(x, y).statistic),
        "pearson": float(stats.pearsonr(x, y).statistic),
    }


def rater_averaged_correlations(
    predicted: Sequence[float] | np.ndarray,
    rater_scores: np.ndarray,
    *,
    prediction_decimals: int | None = 4,
    result_decimals: int | None = 4,
) -> dict[str, float]:
    """The VATEX-EVAL protocol of the EMScore paper (Shi et al., CVPR 2022; its
    `compute_correlation_uniquehuman`): predictions rounded to `prediction_decimals`, then each
    correlation computed against every rater column separately and averaged over the raters, the
    average rounded to `result_decimals`. The paper reports Kendall tau_b and Spearman; tau_c and
    Pearson are averaged the same way for completeness.

    `rater_scores` has one row per prediction and one column per rater, with no missing values.
    """
    scores = np.asarray(rater_scores, dtype=np.float64)
    x = np.asarray(predicted, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != x.shape[0]:
        raise ValueError("rater_scores must have one row per prediction")
    if scores.shape[1] == 0:
        raise ValueError("at least one rater column is needed")
    if np.isnan(scores).any():
        raise ValueError("every rater column must score every prediction")
    if prediction_decimals is not None:
        x = np.around(x, prediction_decimals)
    per_rater = [correlations(x, scores[:, column]) for column in range(scores.shape[1])]
    averaged = {key: float(np.mean([row[key] for row in per_rater])) for key in per_rater[0]}
    if result_decimals is not None:
        averaged = {
            key: float(np.around(value, result_decimals)) for key, value in averaged.items()
        }
    return averaged
