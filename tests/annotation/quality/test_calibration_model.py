"""The ordinal rater-severity model on simulated raters with planted severities and known item
qualities (no database): what it recovers, that it helps where raters differ and changes nothing
material where they do not, and that its gradient and uncertainty are right."""

from __future__ import annotations

import numpy as np
import pytest

from annotation.quality.calibration import (
    CalibrationSettings,
    RatingTable,
    _Objective,
    calibration_fit,
    expected_rating,
)
from annotation.quality.calibration_simulation import ratings_simulate


def pearson(left: np.ndarray, right: np.ndarray) -> float:
    return float(np.corrcoef(left, right)[0, 1])


@pytest.fixture(scope="module")
def planted():
    # 40 raters with severities of sd 0.8 logits, 4,000 items, 3 ratings each (a crowd campaign).
    simulation = ratings_simulate(items=4000, raters=40, severity_sd=0.8, seed=7)
    return simulation, calibration_fit(simulation.table)


@pytest.fixture(scope="module")
def unplanted():
    simulation = ratings_simulate(items=4000, raters=40, severity_sd=0.0, seed=7)
    return simulation, calibration_fit(simulation.table)


def test_estimated_severities_correlate_with_the_planted_ones(planted):
    simulation, fit = planted
    assert fit.statistics["converged"] is True
    assert np.isfinite(fit.severity).all()
    assert pearson(fit.severity, simulation.true_severity) >= 0.95  # measured 0.967
    assert abs(float(fit.severity.mean())) < 1e-9  # centred
    # Harsh is positive: the harshest planted rater is among the three highest estimates.
    assert int(np.argmax(simulation.true_severity)) in np.argsort(fit.severity)[-3:].tolist()


def test_severity_intervals_cover_the_planted_values_about_95_percent_of_the_time(planted):
    simulation, fit = planted
    inside = np.abs(fit.severity - simulation.true_severity) <= 1.96 * fit.severity_se
    # Measured: 0.925 (seeds 8, 9: 0.90, 0.875): the diagonal Laplace approximation is a little
    # optimistic, as documented.
    assert 0.85 <= inside.mean() <= 1.0
    # And item qualities too (one interval per item: 4,000 checks).
    covered = np.abs(fit.quality - simulation.true_quality) <= 1.96 * fit.quality_se
    assert 0.9 <= covered.mean() <= 0.99


def test_calibrated_scores_track_true_quality_better_than_raw_means(planted):
    simulation, fit = planted
    calibrated = pearson(fit.calibrated, simulation.true_quality)
    raw = pearson(fit.raw_mean, simulation.true_quality)
    # Measured at seed 7: 0.677 against 0.652 (seeds 8 and 9: 0.687/0.664, 0.676/0.650).
    assert calibrated > raw + 0.015
    assert fit.statistics["severity_reliability"] > 0.9


def test_with_no_severity_planted_calibration_changes_nothing_material(unplanted):
    simulation, fit = unplanted
    calibrated = pearson(fit.calibrated, simulation.true_quality)
    raw = pearson(fit.raw_mean, simulation.true_quality)
    # Measured at seed 7: 0.6893 (calibrated) and 0.6902 (raw) with the truth, a difference of
    # 0.0009; the calibrated scores correlate 0.9935 with the raw means and differ from them by
    # 0.17 points on average (shrinkage of items with three ratings toward the middle, which
    # costs nothing in correlation with the truth).
    assert abs(calibrated - raw) < 0.005
    assert pearson(fit.calibrated, fit.raw_mean) > 0.98
    # The estimated severities are noise: their spread is about what their standard errors
    # predict (0.166 against a median standard error of 0.125; reliability 0.26, where 0.95
    # with severities planted).
    assert fit.statistics["severity_reliability"] < 0.5
    assert float(fit.severity.std()) < 1.6 * float(np.median(fit.severity_se))


def test_gradient_matches_finite_differences():
    simulation = ratings_simulate(items=30, raters=6, severity_sd=0.5, seed=3)
    objective = _Objective(simulation.table, CalibrationSettings())
    generator = np.random.default_rng(0)
    point = generator.normal(0.0, 0.5, len(objective.scale))
    value, gradient = objective(point)
    step = 1e-6
    for index in range(len(point)):
        shifted = point.copy()
        shifted[index] += step
        forward, _ = objective(shifted)
        shifted[index] -= 2 * step
        backward, _ = objective(shifted)
        assert gradient[index] == pytest.approx((forward - backward) / (2 * step), abs=1e-5)
    assert np.isfinite(value)


def test_a_rater_one_point_harsher_gets_a_positive_severity_and_the_items_keep_their_order():
    # Ten items of rising quality, rated by four raters; "harsh" gives one point less (floor 1).
    item, rater, value = [], [], []
    for index in range(10):
        base = 1 + index // 2
        for worker in range(4):
            item.append(index)
            rater.append(worker)
            value.append(max(1, base - 1) if worker == 3 else base)
    table = RatingTable(item=item, rater=rater, value=value, items=10, raters=4)
    fit = calibration_fit(table)
    assert fit.severity[3] > 0.5
    assert all(fit.severity[worker] < 0 for worker in range(3))
    assert np.all(np.diff(fit.calibrated[::2]) > 0)


def test_items_rated_at_the_end_of_the_scale_by_everyone_stay_finite():
    table = RatingTable(
        item=[0, 0, 0, 1, 1, 1],
        rater=[0, 1, 2, 0, 1, 2],
        value=[5, 5, 5, 1, 1, 1],
        items=2,
        raters=3,
    )
    fit = calibration_fit(table)
    assert np.isfinite(fit.quality).all() and np.isfinite(fit.severity_se).all()
    assert 4.0 < fit.calibrated[0] <= 5.0 and 1.0 <= fit.calibrated[1] < 2.0


def test_unrated_items_and_raters_get_no_estimate():
    table = RatingTable(
        item=[0, 0, 1, 1], rater=[0, 1, 0, 1], value=[2, 3, 4, 5], items=3, raters=3
    )
    fit = calibration_fit(table)
    assert np.isnan(fit.calibrated[2]) and np.isnan(fit.severity[2])
    assert fit.item_ratings.tolist() == [2, 2, 0] and fit.rater_ratings.tolist() == [2, 2, 0]


def test_ratings_outside_the_scale_are_refused():
    with pytest.raises(ValueError, match=r"ratings must lie in 1\.\.5"):
        RatingTable(item=[0], rater=[0], value=[6], items=1, raters=1)


def test_expected_rating_spans_the_scale():
    thresholds = np.array([-2.0, -1.0, 1.0, 2.0])
    values = expected_rating(np.array([-40.0, 0.0, 40.0]), thresholds)
    assert values[0] == pytest.approx(1.0, abs=1e-9)
    assert values[1] == pytest.approx(3.0, abs=1e-9)
    assert values[2] == pytest.approx(5.0, abs=1e-9)
