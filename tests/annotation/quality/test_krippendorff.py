from __future__ import annotations

import krippendorff
import numpy as np
import pytest

from annotation.quality.krippendorff import (
    CoincidenceSum,
    alpha_from_coincidence,
    alpha_from_counts,
    coincidence_from_counts,
    counts_from_ratings,
)


def _reliability_to_counts(reliability: np.ndarray) -> np.ndarray:
    items = reliability.shape[1]
    rater, item = np.nonzero(~np.isnan(reliability))
    return counts_from_ratings(item, reliability[rater, item].astype(int), items=items)


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_alpha_matches_the_krippendorff_package_with_missing_values(level):
    generator = np.random.default_rng(7)
    truth = generator.integers(1, 6, size=400)
    noise = generator.integers(-1, 2, size=(6, 400))
    reliability = np.clip(truth + noise, 1, 5).astype(float)
    reliability[generator.random(reliability.shape) < 0.4] = np.nan  # sparse, like a crowd

    expected = krippendorff.alpha(
        reliability_data=reliability, level_of_measurement=level, value_domain=[1, 2, 3, 4, 5]
    )
    counts = _reliability_to_counts(reliability)
    assert alpha_from_counts(counts, level=level) == pytest.approx(expected, abs=1e-9)


def test_chunked_coincidences_add_up_to_the_whole():
    generator = np.random.default_rng(3)
    counts = generator.integers(0, 3, size=(1000, 5))
    whole = coincidence_from_counts(counts)
    chunked = coincidence_from_counts(counts[:400]) + coincidence_from_counts(counts[400:])
    np.testing.assert_allclose(whole, chunked)
    assert alpha_from_coincidence(chunked) == pytest.approx(alpha_from_counts(counts))


def test_the_coincidence_sum_is_bit_identical_in_any_order_and_any_chunks():
    """Items rated 3, 4 and 5 times (divisions by 2, 3 and 4): summed item by item in floating
    point, the order changed the last bits; `CoincidenceSum` gives one matrix, so the agreement
    API (SQL rows in chunks) and QC (columns in candidate order) report the same alpha exactly."""
    generator = np.random.default_rng(24)
    counts = np.zeros((3000, 5), dtype=np.int64)
    for row, ratings in zip(counts, generator.integers(3, 6, size=3000), strict=True):
        np.add.at(row, generator.integers(0, 5, size=ratings), 1)
    whole = coincidence_from_counts(counts)
    for seed in range(5):
        order = np.random.default_rng(seed).permutation(len(counts))
        chunked = CoincidenceSum(5)
        for chunk in np.array_split(counts[order].astype(np.float64), 7):
            chunked.add(chunk)
        assert np.array_equal(chunked.matrix(), whole)
        assert alpha_from_coincidence(chunked.matrix()) == alpha_from_counts(counts)


def test_no_pairable_items_gives_none():
    assert alpha_from_counts(np.array([[1, 0, 0, 0, 0], [0, 0, 1, 0, 0]])) is None


def test_ratings_outside_the_domain_are_refused():
    with pytest.raises(ValueError):
        counts_from_ratings(np.array([0]), np.array([6]), items=1)
