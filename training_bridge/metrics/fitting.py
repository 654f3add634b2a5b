"""Fit a metric on one evaluation set (a release's train split) and evaluate it, fitted, on another
(its test split) — issue 30, point 3. Plain NumPy over `benchmark.BenchmarkSet`s; the Django side
(reading the splits, refusing leakage, storing the result) is `services/metric_fitting.py`.

What is fitted:

- Redemption Score (`redemption.RedemptionScore`): its fusion weights (α, β, γ, λ) by the
  constrained grid search of seed 002 §3.4 (`redemption.fit_fusion`) on the training set's signals;
  the test set is scored with the fitted weights, and also with the weights the plug-in was built
  with (`weights_given`, by default the published ones) for comparison.
- any other metric: a calibration onto the human scale, the least-squares line
  human ≈ slope · score + intercept on the training set. A positive affine map changes no rank and
  no Pearson correlation, so the test row's correlations are the raw metric's; what the
  calibration buys is the error on the human scale (`test_error`: RMSE and MAE of the calibrated
  scores against the test set's human scores, beside those of the uncalibrated scores).

Correlations are `benchmark.correlation_row` rows (x100) under the default protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from training_bridge.metrics.benchmark import BenchmarkSet, correlation_row
from training_bridge.metrics.plugins import CaptionMetric


@dataclass(frozen=True)
class FitResult:
    fitted: dict[str, Any]  # the parameters, JSON-ready
    result: dict[str, Any]  # {"train": row, "test": row, ...}


def _error(predicted: np.ndarray, human: np.ndarray) -> dict[str, float]:
    difference = np.asarray(predicted, dtype=np.float64) - np.asarray(human, dtype=np.float64)
    return {
        "rmse": float(np.sqrt(np.mean(difference**2))),
        "mae": float(np.mean(np.abs(difference))),
    }


def fit_and_evaluate(
    metric: CaptionMetric,
    train: BenchmarkSet,
    test: BenchmarkSet,
    *,
    reference_count: int | None = None,
) -> FitResult:
    """Fit `metric` on `train`, evaluate the fitted metric on `test` (see the module docstring)."""
    from training_bridge.metrics.redemption import RedemptionScore, fit_fusion, fuse, squash

    if isinstance(metric, RedemptionScore):
        train_signals = squash(metric.signals(train.items(reference_count)))
        fit = fit_fusion(train_signals, train.human)
        test_signals = squash(metric.signals(test.items(reference_count)))
        weights = (fit.alpha, fit.beta, fit.gamma, fit.interpolation)
        fitted_train = fuse(train_signals, *weights)
        fitted_test = fuse(test_signals, *weights)
        given_test = fuse(test_signals, *metric.weights)
        return FitResult(
            fitted={"kind": "fusion", **fit.as_dict()},
            result={
                "train": correlation_row(fitted_train, train),
                "test": correlation_row(fitted_test, test),
                "test_weights_given": correlation_row(given_test, test),
                "weights_given": list(metric.weights),
                "candidates": {"train": len(train.candidates), "test": len(test.candidates)},
            },
        )
    train_scores = np.asarray(metric.score(train.items(reference_count)), dtype=np.float64)
    test_scores = np.asarray(metric.score(test.items(reference_count)), dtype=np.float64)
    if np.std(train_scores) == 0:
        raise ValueError(f"{metric.name} gives every training candidate the same score")
    slope, intercept = np.polyfit(train_scores, train.human, 1)
    calibrated = slope * test_scores + intercept
    return FitResult(
        fitted={"kind": "affine", "slope": float(slope), "intercept": float(intercept)},
        result={
            "train": correlation_row(slope * train_scores + intercept, train),
            "test": correlation_row(calibrated, test),
            "test_error": _error(calibrated, test.human),
            "test_error_uncalibrated": _error(test_scores, test.human),
            "candidates": {"train": len(train.candidates), "test": len(test.candidates)},
        },
    )
