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
    # Measured with the exact Laplace covariance: 0.925 (seeds 8, 9: 0.90, 0.875); 40 intervals,
    # so a share has a sampling sd of about 0.035.
    assert 0.85 <= inside.mean() <= 1.0
    # And item qualities too (one interval per item: 4,000 checks; measured 0.9675, seeds 8, 9:
    # 0.9615, 0.964 — the priors' shrinkage makes them a little conservative).
    covered = np.abs(fit.quality - simulation.true_quality) <= 1.96 * fit.quality_se
    assert 0.94 <= covered.mean() <= 0.99


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
    # predict (0.166 against a median standard error of 0.123; reliability 0.29, where 0.95
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


# ---- The exact Laplace covariance and the parameter count, against finite differences ----------


def negative_log_posterior(
    point: np.ndarray,
    table: RatingTable,
    settings: CalibrationSettings | None,
) -> float:
    """Written from the model's definition (not from the module): -log P(ratings) in the
    parameters (theta, beta, tau) directly, plus the Gaussian priors (none when settings is None)."""
    theta = point[: table.items]
    beta = point[table.items : table.items + table.raters]
    tau = point[table.items + table.raters :]
    eta = theta[table.item] - beta[table.rater]
    edges = np.concatenate([[-np.inf], tau, [np.inf]])
    upper = 1.0 / (1.0 + np.exp(-(edges[table.value] - eta)))
    lower = 1.0 / (1.0 + np.exp(-(edges[table.value - 1] - eta)))
    value = -float(np.log(upper - lower).sum())
    if settings is not None:
        value += 0.5 * float(theta @ theta) / settings.quality_prior_sd**2
        value += 0.5 * float(beta @ beta) / settings.severity_prior_sd**2
        value += 0.5 * float(tau @ tau) / settings.threshold_prior_sd**2
    return value


def numerical_hessian(function, point: np.ndarray, step: float = 1e-4) -> np.ndarray:
    size = len(point)
    hessian = np.zeros((size, size))
    for row in range(size):
        for column in range(row, size):
            total = 0.0
            for sign_row, sign_column, factor in ((1, 1, 1), (1, -1, -1), (-1, 1, -1), (-1, -1, 1)):
                shifted = point.copy()
                shifted[row] += sign_row * step
                shifted[column] += sign_column * step
                total += factor * function(shifted)
            hessian[row, column] = hessian[column, row] = total / (4 * step * step)
    return hessian


@pytest.fixture(scope="module")
def small_fit():
    # 24 items, 5 raters, 3 ratings each, every category used (checked below).
    simulation = ratings_simulate(items=24, raters=5, severity_sd=0.7, seed=11)
    table = simulation.table
    settings = CalibrationSettings()
    fit = calibration_fit(table, settings=settings)
    point = np.concatenate([fit.quality, fit.severity, fit.thresholds])
    # The Hessian is the same at the centred point as at the mode: the likelihood's depends on
    # theta - beta and tau only, the priors' is constant.
    hessian = numerical_hessian(lambda x: negative_log_posterior(x, table, settings), point)
    return table, fit, point, hessian


def test_standard_errors_equal_the_inverse_of_a_numerical_hessian(small_fit):
    table, fit, point, hessian = small_fit
    assert sorted(set(table.value.tolist())) == [1, 2, 3, 4, 5]
    assert fit.statistics["converged"] is True
    covariance = np.linalg.inv(hessian)
    items, raters = table.items, table.raters
    # The reported quality is theta_i - mean(beta), the reported severity beta_j - mean(beta).
    average = np.zeros(len(point))
    average[items : items + raters] = 1.0 / raters
    quality_rows = np.eye(len(point))[:items] - average
    severity_rows = np.eye(len(point))[items : items + raters] - average
    quality_se = np.sqrt(np.einsum("ij,jk,ik->i", quality_rows, covariance, quality_rows))
    severity_se = np.sqrt(np.einsum("ij,jk,ik->i", severity_rows, covariance, severity_rows))
    np.testing.assert_allclose(fit.quality_se, quality_se, rtol=1e-5)
    np.testing.assert_allclose(fit.severity_se, severity_se, rtol=1e-5)
    # The calibrated score E(theta_i - mean(beta), tau): its gradient by finite differences.
    step = 1e-6
    calibrated_se = []
    for index in range(items):
        gradient = np.zeros(len(point))
        for position in [index, *range(items, len(point))]:
            shifted_up, shifted_down = point.copy(), point.copy()
            shifted_up[position] += step
            shifted_down[position] -= step

            def score(x: np.ndarray, index: int = index) -> float:
                quality = x[index] - x[items : items + raters].mean()
                return float(expected_rating(np.array([quality]), x[items + raters :])[0])

            gradient[position] = (score(shifted_up) - score(shifted_down)) / (2 * step)
        calibrated_se.append(float(np.sqrt(gradient @ covariance @ gradient)))
    np.testing.assert_allclose(fit.calibrated_se, calibrated_se, rtol=1e-4)


def test_the_old_diagonal_errors_were_too_small_on_this_case(small_fit):
    """What the exact covariance changes: the diagonal Schur approximation it replaced (items
    against their raters' information only, thresholds ignored) was smaller on every item."""
    table, fit, point, _hessian = small_fit
    settings = CalibrationSettings()
    eta = point[table.item] - point[table.items + table.rater]
    edges = np.concatenate([[-np.inf], fit.thresholds, [np.inf]])
    s_upper = 1.0 / (1.0 + np.exp(-(edges[table.value] - eta)))
    s_lower = 1.0 / (1.0 + np.exp(-(edges[table.value - 1] - eta)))
    weight = s_upper * (1 - s_upper) + s_lower * (1 - s_lower)
    item_information = np.bincount(table.item, weights=weight) + settings.quality_prior_sd**-2
    rater_information = np.bincount(table.rater, weights=weight) + settings.severity_prior_sd**-2
    diagonal_se = 1.0 / np.sqrt(
        item_information
        - np.bincount(table.item, weights=weight**2 / rater_information[table.rater])
    )
    assert np.all(diagonal_se < fit.quality_se)


def test_the_parameter_count_is_the_rank_of_the_likelihood_hessian(small_fit):
    table, fit, point, _hessian = small_fit
    likelihood_hessian = numerical_hessian(lambda x: negative_log_posterior(x, table, None), point)
    eigenvalues = np.linalg.eigvalsh(likelihood_hessian)
    rank = int((eigenvalues > 1e-6 * eigenvalues.max()).sum())
    # 24 items + 5 raters + 4 thresholds, less 2 free directions (one connected part).
    assert rank == 31
    assert fit.statistics["parameters"] == 31
    loglik = fit.statistics["log_likelihood"]
    assert fit.statistics["aic"] == pytest.approx(2 * 31 - 2 * loglik, abs=2e-3)
    assert fit.statistics["bic"] == pytest.approx(31 * np.log(len(table)) - 2 * loglik, abs=2e-3)


def test_two_unconnected_groups_of_raters_leave_one_more_direction_free():
    # Items 0-3 rated by raters 0-1 only, items 4-7 by raters 2-3 only: two connected parts.
    item, rater, value = [], [], []
    pattern = [1, 2, 3, 4, 5, 2, 3, 4]
    for index in range(8):
        for worker in (0, 1) if index < 4 else (2, 3):
            item.append(index)
            rater.append(worker)
            value.append(pattern[(index + worker) % 8])
    table = RatingTable(item=item, rater=rater, value=value, items=8, raters=4)
    fit = calibration_fit(table)
    point = np.concatenate([fit.quality, fit.severity, fit.thresholds])
    likelihood_hessian = numerical_hessian(lambda x: negative_log_posterior(x, table, None), point)
    eigenvalues = np.linalg.eigvalsh(likelihood_hessian)
    rank = int((eigenvalues > 1e-6 * eigenvalues.max()).sum())
    assert rank == 8 + 4 + 4 - 3
    assert fit.statistics["parameters"] == 13


def test_standard_errors_on_a_three_point_scale_with_an_unrated_item_and_rater():
    simulation = ratings_simulate(
        items=20, raters=4, severity_sd=0.7, thresholds=(-1.0, 1.0), seed=2
    )
    rated = simulation.table
    table = RatingTable(
        item=rated.item, rater=rated.rater, value=rated.value, items=21, raters=5, categories=3
    )
    settings = CalibrationSettings()
    fit = calibration_fit(table, settings=settings)
    assert np.isnan(fit.quality_se[20]) and np.isnan(fit.severity_se[4])
    point = np.concatenate(
        [np.nan_to_num(fit.quality), np.nan_to_num(fit.severity), fit.thresholds]
    )
    covariance = np.linalg.inv(
        numerical_hessian(lambda x: negative_log_posterior(x, table, settings), point)
    )
    average = np.zeros(len(point))
    average[21:25] = 1.0 / 4  # the four raters with ratings
    rows = np.eye(len(point))[:20] - average
    expected = np.sqrt(np.einsum("ij,jk,ik->i", rows, covariance, rows))
    np.testing.assert_allclose(fit.quality_se[:20], expected, rtol=1e-5)
    assert fit.statistics["parameters"] == 20 + 4 + 2 - 2
