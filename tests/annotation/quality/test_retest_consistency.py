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


def test_the_campaign_summary_averages_workers_and_labels_the_pooled_kappa_apart():
    """Two workers, each reproducing nothing within the end of the scale they use: worker 0 rates
    1 or 2, worker 1 rates 4 or 5, and each gets every combination once. By hand (K = 5, weights
    (i - j)² / 16): within each worker observed and expected disagreement are both 1/32, kappa 0.
    Pooled, observed disagreement is 4 pairs x 1/8 x 1/16 = 1/32, and expected over the uniform
    marginals on {1, 2, 4, 5} is 80 / 16 / 16 = 5/16 (the squared differences of the 16 ordered
    pairs sum to 80), so the pooled kappa is 1 - (1/32) / (5/16) = 0.9: the difference between
    the workers counted as consistency."""
    from annotation.quality.consistency import within_worker_summary

    worker = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    first = np.array([1, 2, 1, 2, 4, 5, 4, 5])
    second = np.array([1, 2, 2, 1, 4, 5, 5, 4])
    result = repeat_consistency(worker=worker, first=first, second=second, workers=2)
    assert result.kappa.tolist() == pytest.approx([0.0, 0.0], abs=1e-12)
    assert result.pooled_kappa == pytest.approx(0.9, abs=1e-12)
    summary = within_worker_summary(result.kappa, np.array([True, True]))
    assert summary == {
        "worker_kappa_mean": 0.0,
        "worker_kappa_median": 0.0,
        "workers_with_kappa": 2,
    }


def test_the_summary_leaves_out_workers_without_enough_pairs_or_without_a_kappa():
    from annotation.quality.consistency import within_worker_summary

    kappas = np.array([0.2, 0.5, np.nan, 0.9, 0.6])
    enough = np.array([True, True, True, False, True])
    # 0.9 has too few pairs, NaN is undefined: mean of 0.2, 0.5, 0.6 = 0.4333, median 0.5.
    assert within_worker_summary(kappas, enough) == {
        "worker_kappa_mean": 0.4333,
        "worker_kappa_median": 0.5,
        "workers_with_kappa": 3,
    }
    assert within_worker_summary(kappas, np.zeros(5, dtype=bool)) == {
        "worker_kappa_mean": None,
        "worker_kappa_median": None,
        "workers_with_kappa": 0,
    }
