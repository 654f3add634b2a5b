"""Intra-rater consistency (quadratic-weighted kappa over repeat pairs) on simulated consistent
and inconsistent workers, and against an independent computation (scikit-learn's definition,
written out here)."""

from __future__ import annotations

import numpy as np
import pytest

from annotation.quality.retest import repeat_consistency


def reference_kappa(first: list[int], second: list[int], categories: int = 5) -> float:
    """Quadratic-weighted kappa, the textbook way, one pair at a time."""
    observed = np.zeros((categories, categories))
    for a, b in zip(first, second, strict=True):
        observed[a - 1, b - 1] += 1
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    weights = np.array(
        [
            [(i - j) ** 2 / (categories - 1) ** 2 for j in range(categories)]
            for i in range(categories)
        ]
    )
    return 1.0 - (weights * observed).sum() / (weights * expected).sum()


def test_consistent_workers_score_high_and_inconsistent_ones_near_zero():
    generator = np.random.default_rng(5)
    workers, pairs_each = 20, 40
    worker = np.repeat(np.arange(workers), pairs_each)
    first = generator.integers(1, 6, len(worker))
    consistent = worker < 10
    # Consistent workers repeat their rating, off by one a fifth of the time; inconsistent ones
    # answer at random the second time.
    jitter = np.where(
        generator.random(len(worker)) < 0.2, generator.choice([-1, 1], len(worker)), 0
    )
    second = np.where(
        consistent, np.clip(first + jitter, 1, 5), generator.integers(1, 6, len(worker))
    )
    result = repeat_consistency(worker=worker, first=first, second=second, workers=workers)
    assert result.pairs.tolist() == [pairs_each] * workers
    assert np.all(result.kappa[:10] > 0.85)
    assert np.all(np.abs(result.kappa[10:]) < 0.45)
    assert result.kappa[:10].min() > result.kappa[10:].max()
    assert np.all(result.exact_agreement[:10] >= 0.65)
    for index in (0, 13):
        mask = worker == index
        assert result.kappa[index] == pytest.approx(
            reference_kappa(first[mask].tolist(), second[mask].tolist()), abs=1e-12
        )
    assert result.pooled_pairs == workers * pairs_each
    assert result.pooled_kappa == pytest.approx(
        reference_kappa(first.tolist(), second.tolist()), abs=1e-12
    )


def test_a_worker_who_always_gives_the_same_rating_has_no_kappa_and_one_without_pairs_neither():
    result = repeat_consistency(
        worker=np.array([0, 0, 0]), first=np.array([3, 3, 3]), second=np.array([3, 3, 3]), workers=2
    )
    assert np.isnan(result.kappa[0]) and result.exact_agreement[0] == 1.0
    assert (
        result.pairs[1] == 0 and np.isnan(result.kappa[1]) and np.isnan(result.exact_agreement[1])
    )


def test_ratings_outside_the_scale_are_refused():
    with pytest.raises(ValueError, match=r"ratings must lie in 1\.\.5"):
        repeat_consistency(
            worker=np.array([0]), first=np.array([6]), second=np.array([1]), workers=1
        )
