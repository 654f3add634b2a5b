"""How clips are assigned to splits: the rule the release reads implement in SQL
(`export.reads.sql_selection.assign_splits`), with exact integer arithmetic.

Within each score stratum, clips are ordered by md5("<seed>:<clip id>") (then by row id, which only
matters for md5 collisions) and laid end to end by their number of candidates; a clip goes to the
split whose share of the stratum its midpoint falls in. A clip's band is its mean training class
(sum // count, clamped to 1..4): [1, 2), [2, 3), [3, 4), [4, 5]. Strata are those bands, merged
upwards while a band has fewer clips than it takes to give the smallest split about five of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

# train / validation / test: the default of every door (service, command, form, API). The test split
# is what a training run reports as its results; validation only chooses Phase 1's epoch.
DEFAULT_RATIOS = (0.8, 0.1, 0.1)
SCORE_BANDS = (1, 2, 3, 4)
METHOD = (
    "grouped by clip; within strata of the clip's mean training class (1-2, 2-3, 3-4, 4-5, small "
    "strata merged), clips ordered by md5('<seed>:<clip id>') and assigned by the midpoint of "
    "their cumulative candidate count"
)


def strata_of(band_sizes: dict[int, int], ratios: Sequence[float]) -> dict[int, int]:
    """band -> stratum: bands merged upwards until each has ceil(5 / smallest ratio) clips; a
    too-small remainder joins the last stratum."""
    minimum = math.ceil(5 / min(ratios))
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for band in SCORE_BANDS:
        current.append(band)
        size += band_sizes.get(band, 0)
        if size >= minimum:
            groups.append(current)
            current, size = [], 0
    if current:
        if groups:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return {band: number for number, group in enumerate(groups) for band in group}


def cumulative_bounds(ratios: Sequence[float]) -> list[Fraction]:
    """Exact upper bounds of every split but the last (0.8, 0.1, 0.1 -> 4/5, 9/10)."""
    return [
        Fraction(str(round(float(sum(ratios[: index + 1])), 12)))
        for index in range(len(ratios) - 1)
    ]


def describe(band_sizes: dict[int, int], strata: dict[int, int]) -> dict[str, object]:
    return {
        "method": METHOD,
        "score_bands": {str(band): band_sizes.get(band, 0) for band in SCORE_BANDS},
        "strata": [
            [band for band, stratum in strata.items() if stratum == number]
            for number in sorted(set(strata.values()))
        ],
    }
