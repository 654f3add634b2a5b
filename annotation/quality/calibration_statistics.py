"""The summary figures of a calibration fit (docs/calibration.md): information criteria,
severity spread and reliability, infit/outfit, and how the calibrated scores compare with the raw
means. Plain NumPy, kept apart from the model in `annotation.quality.calibration`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray


def _rounded(value: float, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


def fit_statistics(
    *,
    model: str,
    judgments: int,
    categories: int,
    loglik: float,
    parameters: int,
    beta: NDArray[np.float64],
    beta_se: NDArray[np.float64],
    infit: NDArray[np.float64],
    outfit: NDArray[np.float64],
    outfit_all: float,
    infit_all: float,
    calibrated: NDArray[np.float64],
    raw_mean: NDArray[np.float64],
    tau: NDArray[np.float64],
    result: Any,
    evaluations: int,
    settings: dict[str, Any],
    seconds: float,
) -> dict[str, Any]:
    """The fit's summary stored with a calibration run (rounded; None where undefined)."""
    observed_variance = float(beta.var()) if beta.size > 1 else 0.0
    noise = float(np.mean(beta_se**2)) if beta.size else 0.0
    reliability = (
        max(0.0, (observed_variance - noise) / observed_variance) if observed_variance > 0 else 0.0
    )
    if calibrated.size > 1 and raw_mean.std() > 0 and calibrated.std() > 0:
        correlation = float(np.corrcoef(calibrated, raw_mean)[0, 1])
    else:
        correlation = float("nan")
    return {
        "model": model,
        "judgments": judgments,
        "items": int(calibrated.size),
        "raters": int(beta.size),
        "categories": categories,
        "parameters": parameters,
        "log_likelihood": _rounded(loglik, 3),
        "deviance": _rounded(-2.0 * loglik, 3),
        "aic": _rounded(2.0 * parameters - 2.0 * loglik, 3),
        "bic": _rounded(parameters * math.log(max(judgments, 1)) - 2.0 * loglik, 3),
        "thresholds": [_rounded(value) for value in tau.tolist()],
        "severity_sd": _rounded(float(beta.std()) if beta.size else 0.0),
        "severity_min": _rounded(float(beta.min())) if beta.size else None,
        "severity_max": _rounded(float(beta.max())) if beta.size else None,
        "severity_se_median": _rounded(float(np.median(beta_se))) if beta.size else None,
        "severity_reliability": _rounded(reliability),
        "infit_mean_square": _rounded(infit_all),
        "outfit_mean_square": _rounded(outfit_all),
        "raters_misfitting": int(((infit > 1.5) | (outfit > 2.0)).sum()),
        "calibrated_vs_raw_correlation": _rounded(correlation),
        "calibrated_vs_raw_mean_absolute_difference": _rounded(
            float(np.abs(calibrated - raw_mean).mean()) if calibrated.size else 0.0
        ),
        "converged": bool(result.converged),
        "optimizer_message": result.message,
        "iterations": int(result.iterations),
        "gradient_max": _rounded(result.gradient_max, 8),
        "evaluations": evaluations,
        "seconds": round(seconds, 3),
        "settings": settings,
    }
