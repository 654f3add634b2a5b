"""Krippendorff's alpha from item × value counts.

Memory grows with the number of items and values, never with the number of raters: a campaign
with 10,000 workers costs the same as one with three. Coincidence matrices of disjoint item sets
add up, so large tables can be streamed in chunks (`CoincidenceSum.add` per chunk, then
`alpha_from_coincidence` of its `matrix()`), exactly: the result does not depend on the chunks.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

Level = Literal["nominal", "ordinal", "interval"]


class CoincidenceSum:
    """The coincidence matrix of item × value count tables added up exactly: the same matrix,
    bit for bit, whatever the order of the items and however they are split into chunks.

    An item rated m times adds (n nᵀ − diag n) / (m − 1). Summed in floating point item by item,
    the result depends on the order (a campaign's alpha read through SQL and the same alpha from
    QC's columns differed in the last bits). Here the integer part is summed exactly per m and
    divided once, in increasing m. The release statistics (`export.statistics`) use it too.
    """

    def __init__(self, values: int) -> None:
        self.values = values
        self._by_ratings: dict[int, NDArray[np.int64]] = {}

    def add(self, counts: NDArray[np.floating] | NDArray[np.integer]) -> None:
        """Add a (items × values) table of how many raters gave each value; items with fewer
        than two ratings are not pairable and are ignored."""
        raw = np.asarray(counts)
        if raw.ndim != 2 or raw.shape[1] != self.values:
            raise ValueError(f"counts must be a 2-D items × {self.values} table")
        table = np.rint(raw).astype(np.int64)
        if raw.size and not np.array_equal(raw, table):
            raise ValueError("counts must be whole numbers")
        ratings = table.sum(axis=1)
        for m in np.unique(ratings[ratings >= 2]).tolist():
            chosen = table[ratings == m]
            exact = chosen.T @ chosen - np.diag(chosen.sum(axis=0))
            if m in self._by_ratings:
                self._by_ratings[m] += exact
            else:
                self._by_ratings[m] = exact

    def matrix(self) -> NDArray[np.float64]:
        coincidence = np.zeros((self.values, self.values), dtype=np.float64)
        for m in sorted(self._by_ratings):
            coincidence += self._by_ratings[m].astype(np.float64) / float(m - 1)
        return coincidence


def coincidence_from_counts(
    counts: NDArray[np.floating] | NDArray[np.integer],
) -> NDArray[np.float64]:
    """The V × V coincidence matrix of a (items × V) table of how many raters gave each value
    (whole numbers). Items with fewer than two ratings are not pairable and are ignored."""
    table = np.asarray(counts)
    if table.ndim != 2:
        raise ValueError("counts must be a 2-D items × values table")
    coincidences = CoincidenceSum(table.shape[1])
    coincidences.add(table)
    return coincidences.matrix()


def _distance(
    values: NDArray[np.float64], marginals: NDArray[np.float64], level: Level
) -> NDArray[np.float64]:
    if level == "nominal":
        return 1.0 - np.eye(len(values))
    if level == "interval":
        return np.subtract.outer(values, values) ** 2
    if level == "ordinal":
        cumulative = np.cumsum(marginals)
        # Sum of marginals from c to k inclusive, minus half of each end's own marginal.
        low = np.minimum.outer(np.arange(len(values)), np.arange(len(values)))
        high = np.maximum.outer(np.arange(len(values)), np.arange(len(values)))
        between = cumulative[high] - np.where(low > 0, cumulative[low - 1], 0.0)
        return (between - (marginals[:, None] + marginals[None, :]) / 2.0) ** 2
    raise ValueError(f"unknown level of measurement: {level}")


def alpha_from_coincidence(
    coincidence: NDArray[np.float64], *, level: Level = "ordinal", values: list[float] | None = None
) -> float | None:
    """Alpha from a coincidence matrix; None when there is nothing to compare or no variation."""
    matrix = np.asarray(coincidence, dtype=np.float64)
    marginals = matrix.sum(axis=1)
    total = marginals.sum()
    if total <= 1:
        return None
    value_axis = np.asarray(
        values if values is not None else np.arange(1, len(matrix) + 1), dtype=np.float64
    )
    distance = _distance(value_axis, marginals, level)
    observed = float((matrix * distance).sum())
    expected = float((np.outer(marginals, marginals) * distance).sum())
    if expected == 0:
        return None
    return 1.0 - (total - 1.0) * observed / expected


def alpha_from_counts(
    counts: NDArray[np.floating] | NDArray[np.integer],
    *,
    level: Level = "ordinal",
    values: list[float] | None = None,
) -> float | None:
    """Krippendorff's alpha of a (items × V) count table; values default to 1..V."""
    return alpha_from_coincidence(coincidence_from_counts(counts), level=level, values=values)


def counts_from_ratings(
    item_index: NDArray[np.integer],
    ratings: NDArray[np.integer],
    *,
    items: int,
    domain: tuple[int, int] = (1, 5),
) -> NDArray[np.int64]:
    """Build the (items × V) count table from parallel arrays of item index and rating value."""
    low, high = domain
    raw = np.asarray(ratings)
    ratings = raw.astype(np.int64)
    if raw.size and not np.array_equal(raw, ratings):
        raise ValueError("ratings must be whole numbers")
    if ratings.size and (ratings.min() < low or ratings.max() > high):
        raise ValueError(f"ratings outside the value domain {low}..{high}")
    table = np.zeros((items, high - low + 1), dtype=np.int64)
    np.add.at(table, (np.asarray(item_index), ratings - low), 1)
    return table
