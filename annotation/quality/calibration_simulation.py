"""Simulated raters for testing and benchmarking the calibration (no Django).

Each item has a true quality (standard normal on the logit scale), each rater a planted severity;
every item is rated by `ratings_per_item` distinct raters drawn at random (raters are busy to
different degrees, as in a crowd) and the rating follows the cumulative-logit model of
`annotation.quality.calibration` with the given thresholds. Deterministic for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from annotation.quality.calibration import RatingTable

DEFAULT_THRESHOLDS = (-2.2, -0.8, 0.6, 2.0)


@dataclass
class SimulatedRatings:
    table: RatingTable
    true_quality: NDArray[np.float64]
    true_severity: NDArray[np.float64]


def ratings_simulate(
    *,
    items: int,
    raters: int,
    ratings_per_item: int = 3,
    severity_sd: float = 0.8,
    quality_sd: float = 1.0,
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS,
    seed: int = 0,
) -> SimulatedRatings:
    """Ratings of `items` items by `raters` raters (severity_sd = 0: no severity planted)."""
    if ratings_per_item > raters:
        raise ValueError("each item needs distinct raters")
    generator = np.random.default_rng(seed)
    quality = generator.normal(0.0, quality_sd, items)
    severity = generator.normal(0.0, severity_sd, raters) if severity_sd > 0 else np.zeros(raters)
    severity -= severity.mean()
    # Distinct raters per item: a random offset and a step that is never 0 modulo `raters`
    # (k * step mod raters differ for k < ratings_per_item when raters is prime or step is 1).
    activity = generator.gamma(2.0, 1.0, raters)
    first = generator.choice(raters, size=items, p=activity / activity.sum())
    picks = [first]
    for _ in range(1, ratings_per_item):
        candidate = generator.choice(raters, size=items, p=activity / activity.sum())
        clash = np.zeros(items, dtype=bool)
        for earlier in picks:
            clash |= candidate == earlier
        while clash.any():
            candidate[clash] = generator.integers(0, raters, int(clash.sum()))
            clash[:] = False
            for earlier in picks:
                clash |= candidate == earlier
        picks.append(candidate)
    item = np.repeat(np.arange(items, dtype=np.int64), ratings_per_item)
    rater = np.stack(picks, axis=1).reshape(-1).astype(np.int64)
    eta = quality[item] - severity[rater]
    tau = np.asarray(thresholds, dtype=np.float64)
    cumulative = expit(tau[None, :] - eta[:, None])
    draw = generator.random(len(eta))
    value = 1 + (draw[:, None] > cumulative).sum(axis=1)
    table = RatingTable(
        item=item,
        rater=rater,
        value=value.astype(np.int64),
        items=items,
        raters=raters,
        categories=len(tau) + 1,
    )
    return SimulatedRatings(table=table, true_quality=quality, true_severity=severity)
