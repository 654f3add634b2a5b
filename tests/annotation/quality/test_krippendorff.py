from __future__ import annotations

import krippendorff
import numpy as np
import pytest

from annotation.quality.krippendorff import (
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


def test_no_pairable_items_gives_none():
    assert alpha_from_counts(np.array([[1, 0, 0, 0, 0], [0, 0, 1, 0, 0]])) is None


def test_ratings_outside_the_domain_are_refused():
    with pytest.raises(ValueError):
        counts_from_ratings(np.array([0]), np.array([6]), items=1)
