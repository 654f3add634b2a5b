"""Rater-severity calibration: a cumulative-logit (graded-response) facets model, fitted with NumPy.

The model, per campaign and per criterion (question), for judgment n of item i by rater j with
rating y in 1..K:

    P(y <= k) = logistic(tau_k - (theta_i - beta_j)),    k = 1..K-1,   tau_1 < ... < tau_{K-1}

theta_i is the item's quality, beta_j the rater's severity (a harsh rater has beta > 0 and gives
lower ratings to the same item) and tau the thresholds every rater shares: a graded-response
(cumulative-logit) model with a rater facet. It is *not* the many-facet Rasch model of Linacre,
which is an adjacent-category (partial-credit / rating-scale) model: log P(y = k) / P(y = k-1)
is linear there, log P(y <= k) / P(y > k) here.

Why written here: no maintained Python library fits it at this size. crowd-kit (1.4.2) aggregates
*categorical* labels (Dawid-Skene, MACE, GLAD: a rating of 4 is as far from 5 as from 1);
girth (0.8.0, last release 2021) fits graded-response models of persons x items without a rater
facet; statsmodels' OrderedModel needs one dummy column per item and rater (340,000 columns at
scale). The fit is a maximum a posteriori estimate:

- parameters: theta (items), beta (raters), thresholds tau_1 = a, tau_k = tau_{k-1} + exp(d_k)
  (ordered by construction);
- weak Gaussian priors N(0, sd^2) on theta, beta and tau: they identify the two directions the
  likelihood leaves free (theta + c with beta + c; theta + c with tau + c) and keep items rated at
  the end of the scale by everyone finite. Afterwards severities are centred (mean 0, theta moved
  with them, which leaves the likelihood unchanged), so theta is the quality "as an average rater
  would see it";
- the log-likelihood and its gradient are vectorised over judgments (np.bincount onto items and
  raters); scipy's L-BFGS-B (no bounds) runs on variables scaled by an estimate of their
  curvature (about 0.2 x judgments + prior precision), which makes items with 3 judgments and
  raters with 300 equally easy for it. BLAS is held to one thread during the fit (threadpoolctl):
  on a busy machine a multi-threaded BLAS spins its threads on every call of a level-1 routine
  (a 10,000-rating fit took 11.4 s with a multi-threaded BLAS under a load average of 12 on 2
  cores, 0.24 s with one); the objective's own dot products avoid BLAS altogether (`_dot`). A
  hand-written L-BFGS stood here before; at 1,000,000 judgments it was 1.02x as fast as scipy's
  (median of 3 alternated runs: 9.70 s against 9.88 s wall, 2.7 s against 2.9 s CPU, under a load
  average of about 10 on 2 cores), far from the 1.5x that would have justified keeping it
  (bench/calibration_scale.py --optimizers, bench/results/calibration_optimizers_2026-11-27T164659Z_f572df2.json);
- uncertainty: the Laplace approximation, exactly: the inverse of the Hessian of the negative log
  posterior over all parameters (items, severities and thresholds), through the Schur complement
  of its diagonal item block (`annotation.quality.calibration_covariance`). The standard errors
  are those of the reported, centred estimates (theta_i - mean(beta), beta_j - mean(beta)) and
  of the calibrated score (with the thresholds' uncertainty).

The calibrated score of an item is the expected rating of an average rater (beta = 0) on the
1..K scale: E = K - sum_k logistic(tau_k - theta), comparable with the raw mean.

Fit statistics borrow Rasch practice: per rater the outfit (mean squared standardised residual)
and infit (information-weighted) mean squares, about 1 for a rater the model fits; overall the
log-likelihood, deviance, AIC/BIC and the rater separation reliability (share of the observed
variance of severities that is not estimation noise). AIC and BIC count the parameters the
likelihood identifies: items + raters + (K - 1) thresholds, less one free direction per connected
part of the item-rater graph (its items and raters shifted together) and one more for the
thresholds and every item shifted together. The priors pin those directions, not the data.

No Django here: `annotation.quality.calibration_job` reads the database and stores the results.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from annotation.quality.calibration_statistics import fit_statistics

if TYPE_CHECKING:
    from annotation.quality.calibration_covariance import LaplaceErrors

# |theta - beta| beyond this is clipped inside the likelihood (exp stays finite; a rating model
# never needs more than a few logits past its outermost threshold).
ETA_LIMIT = 30.0
MODEL_NAME = "cumulative-logit (graded-response) facets model: item quality, rater severity, shared thresholds"


@dataclass(frozen=True)
class CalibrationSettings:
    """Prior scales (on the logit scale) and optimiser limits."""

    quality_prior_sd: float = 2.0
    severity_prior_sd: float = 2.0
    threshold_prior_sd: float = 5.0
    max_iterations: int = 400
    # L-BFGS-B stops when the objective changes by less than this relative amount per step.
    relative_tolerance: float = 1e-9
    gradient_tolerance: float = 1e-5

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RatingTable:
    """One row per rating: item and rater indices and the rating (1..categories)."""

    item: NDArray[np.int64]
    rater: NDArray[np.int64]
    value: NDArray[np.int64]
    items: int
    raters: int
    categories: int = 5

    def __post_init__(self) -> None:
        self.item = np.asarray(self.item, dtype=np.int64)
        self.rater = np.asarray(self.rater, dtype=np.int64)
        self.value = np.asarray(self.value, dtype=np.int64)
        if not (len(self.item) == len(self.rater) == len(self.value)):
            raise ValueError("item, rater and value must have the same length")
        if self.categories < 2:
            raise ValueError("an ordinal scale needs at least two categories")
        if len(self.value) and (self.value.min() < 1 or self.value.max() > self.categories):
            raise ValueError(f"ratings must lie in 1..{self.categories}")
        if len(self.item) and (self.item.min() < 0 or self.item.max() >= self.items):
            raise ValueError("item index out of range")
        if len(self.rater) and (self.rater.min() < 0 or self.rater.max() >= self.raters):
            raise ValueError("rater index out of range")

    def __len__(self) -> int:
        return len(self.value)


@dataclass
class CalibrationFit:
    """Estimates per item and rater (NaN where an item or rater has no rating)."""

    quality: NDArray[np.float64]  # theta, logit scale, relative to the average rater
    quality_se: NDArray[np.float64]
    calibrated: NDArray[np.float64]  # expected rating of an average rater, 1..K
    calibrated_se: NDArray[np.float64]
    raw_mean: NDArray[np.float64]
    item_ratings: NDArray[np.int64]
    severity: NDArray[np.float64]  # beta, centred over the raters with ratings
    severity_se: NDArray[np.float64]
    rater_ratings: NDArray[np.int64]
    rater_mean: NDArray[np.float64]
    infit: NDArray[np.float64]
    outfit: NDArray[np.float64]
    thresholds: NDArray[np.float64]
    statistics: dict[str, Any] = field(default_factory=dict)


class _Objective:
    """Negative log-posterior and its gradient in the scaled variables z (x = z / scale)."""

    def __init__(self, table: RatingTable, settings: CalibrationSettings) -> None:
        self.table = table
        self.settings = settings
        self.items, self.raters, self.categories = table.items, table.raters, table.categories
        # Item-major order: the gathers of theta and the bincounts onto items read memory in
        # sequence (the rater table is small enough to stay in cache). Sorting by (item, rater)
        # also makes every sum independent of the order the ratings were read in, so a re-fit of
        # the same judgments gives bit-identical estimates (and stores nothing new).
        order = np.lexsort((table.rater, table.item))
        self.item = table.item[order]
        self.rater = table.rater[order]
        self.value = table.value[order]
        self.counts_by_value = np.bincount(self.value, minlength=self.categories + 1).astype(
            np.float64
        )
        item_counts = np.bincount(self.item, minlength=self.items).astype(np.float64)
        rater_counts = np.bincount(self.rater, minlength=self.raters).astype(np.float64)
        total = float(len(table))
        thresholds = self.categories - 1
        curvature = np.concatenate(
            [
                0.2 * item_counts + settings.quality_prior_sd**-2,
                0.2 * rater_counts + settings.severity_prior_sd**-2,
                [0.2 * total + settings.threshold_prior_sd**-2],
                np.full(thresholds - 1, 0.2 * total / thresholds + 1.0),
            ]
        )
        self.scale = np.sqrt(curvature)
        self.evaluations = 0

    def unpack(self, x: NDArray[np.float64]) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
        theta = x[: self.items]
        beta = x[self.items : self.items + self.raters]
        raw = x[self.items + self.raters :]
        tau = raw[0] + np.concatenate([[0.0], np.cumsum(np.exp(raw[1:]))])
        return theta, beta, tau

    def interval_terms(self, tau: NDArray[np.float64]) -> tuple[NDArray[Any], NDArray[Any]]:
        """Per category k: log(1 - exp(tau_{k-1} - tau_k)) (0 for the end categories) and
        q_k = r / (1 - r), its derivative in tau_k, with r = exp(tau_{k-1} - tau_k)."""
        log_width = np.zeros(self.categories + 1)
        ratio = np.zeros(self.categories + 1)
        if self.categories > 2:
            gaps = tau[:-1] - tau[1:]  # for categories 2..K-1, all negative
            log_width[2 : self.categories] = np.log(-np.expm1(gaps))
            r = np.exp(gaps)
            ratio[2 : self.categories] = r / (1.0 - r)
        return log_width, ratio

    def __call__(self, z: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        self.evaluations += 1
        x = z / self.scale
        theta, beta, tau = self.unpack(x)
        # One exponential per judgment: with odds = exp(eta), s(tau_k - eta) = 1 / (1 + odds *
        # exp(-tau_k)) and s(eta - tau_k) = odds / (odds + exp(tau_k)), where exp(+-tau) are
        # per-category constants (0 or infinity at the open ends, which these forms handle).
        eta = theta[self.item]
        eta -= beta[self.rater]
        np.clip(eta, -ETA_LIMIT, ETA_LIMIT, out=eta)
        odds = np.exp(eta)
        edges = np.concatenate([[-np.inf], tau, [np.inf]])
        with np.errstate(over="ignore"):
            upper_factor = np.exp(-edges)[self.value]
            lower_factor = np.exp(edges)[self.value - 1]
        upper_odds = odds * upper_factor
        sigma_upper = 1.0 / (1.0 + upper_odds)  # s(u), u = tau_y - eta
        below_upper = upper_odds * sigma_upper  # 1 - s(u)
        lower_denominator = odds + lower_factor
        above_lower = odds / lower_denominator  # s(-l), l = tau_{y-1} - eta
        sigma_lower = lower_factor / lower_denominator  # s(l)
        log_width, ratio = self.interval_terms(tau)
        # log P(y) = log s(u) + log s(-l) + log(1 - exp(l - u)); the last term depends on tau
        # only, so it is counted once per category.
        loglik = float(np.log(sigma_upper * above_lower).sum()) + float(
            _dot(log_width, self.counts_by_value)
        )
        d_eta = sigma_lower - below_upper
        settings = self.settings
        grad_theta: NDArray[np.float64] = np.bincount(
            self.item, weights=d_eta, minlength=self.items
        ).astype(np.float64, copy=False)
        grad_beta: NDArray[np.float64] = -np.bincount(
            self.rater, weights=d_eta, minlength=self.raters
        ).astype(np.float64, copy=False)
        # d/d tau_k: from categories k (upper edge) and k+1 (lower edge).
        from_upper = np.bincount(self.value, weights=below_upper, minlength=self.categories + 1)
        from_lower = np.bincount(self.value, weights=sigma_lower, minlength=self.categories + 1)
        k = np.arange(1, self.categories)
        grad_tau = (
            from_upper[k]
            - from_lower[k + 1]
            + self.counts_by_value[k] * ratio[k]
            - self.counts_by_value[k + 1] * ratio[k + 1]
        )
        # Priors.
        logprior = -0.5 * (
            _dot(theta, theta) / settings.quality_prior_sd**2
            + _dot(beta, beta) / settings.severity_prior_sd**2
            + _dot(tau, tau) / settings.threshold_prior_sd**2
        )
        grad_theta -= theta / settings.quality_prior_sd**2
        grad_beta -= beta / settings.severity_prior_sd**2
        grad_tau = grad_tau - tau / settings.threshold_prior_sd**2
        # Chain rule to (a, d): tau_k = a + sum_{m<=k} exp(d_m).
        raw = x[self.items + self.raters :]
        tail = np.cumsum(grad_tau[::-1])[::-1]  # sum over k >= m
        grad_raw = np.concatenate([[grad_tau.sum()], np.exp(raw[1:]) * tail[1:]])
        gradient = np.concatenate([grad_theta, grad_beta, grad_raw])
        return -(loglik + logprior), -gradient / self.scale


@dataclass
class OptimizerResult:
    x: NDArray[np.float64]
    value: float
    iterations: int
    converged: bool
    message: str
    gradient_max: float


def objective_minimize(
    objective: Any, start: NDArray[np.float64], settings: CalibrationSettings
) -> OptimizerResult:
    """scipy's L-BFGS-B without bounds (memory 10), BLAS on one thread.

    ftol is scipy's relative decrease test, (f_k - f_k+1) / max(|f_k|, |f_k+1|, 1) <= ftol, and
    gtol the largest projected gradient component, both on the curvature-scaled variables."""
    # Imported here: scipy.optimize costs every process that loads this module (web processes
    # and release builds among them) about 140 ms and 24 MiB, and only a fit needs it.
    import scipy.optimize
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        result = scipy.optimize.minimize(
            objective,
            np.asarray(start, dtype=np.float64),
            jac=True,
            method="L-BFGS-B",
            options={
                "maxiter": settings.max_iterations,
                "maxcor": 10,
                "ftol": settings.relative_tolerance,
                "gtol": settings.gradient_tolerance,
            },
        )
    gradient = np.asarray(result.jac, dtype=np.float64)
    return OptimizerResult(
        x=np.asarray(result.x, dtype=np.float64),
        value=float(result.fun),
        iterations=int(result.nit),
        converged=bool(result.success),
        message=str(result.message),
        gradient_max=_max_abs(gradient),
    )


def _dot(left: NDArray[np.float64], right: NDArray[np.float64]) -> float:
    """A dot product without BLAS (see the module docstring: BLAS threads spin on a busy
    machine; the optimiser's own BLAS calls are held to one thread)."""
    return float(np.einsum("i,i->", left, right))


def _max_abs(values: NDArray[np.float64]) -> float:
    return float(np.abs(values).max()) if values.size else 0.0


def _initial(table: RatingTable, objective: _Objective) -> NDArray[np.float64]:
    """Thresholds from the marginal cumulative proportions, item qualities from how far each
    item's mean lies from the overall mean (in logit units, roughly), severities 0."""
    counts = objective.counts_by_value[1:] + 0.5
    cumulative = np.cumsum(counts)[:-1] / counts.sum()
    tau = np.log(cumulative / (1.0 - cumulative))
    tau = np.maximum.accumulate(tau + np.arange(len(tau)) * 1e-3)
    gaps = np.maximum(np.diff(tau), 1e-2)
    item_sum = np.bincount(table.item, weights=table.value, minlength=table.items)
    item_count = np.bincount(table.item, minlength=table.items)
    overall = float(table.value.mean()) if len(table) else 0.0
    spread = float(table.value.std()) or 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        item_mean = np.where(item_count > 0, item_sum / np.maximum(item_count, 1), overall)
    theta = 1.5 * (item_mean - overall) / spread * item_count / (item_count + 1.0)
    x = np.concatenate([theta, np.zeros(table.raters), [tau[0]], np.log(gaps)])
    return x * objective.scale


def _category_probabilities(
    eta: NDArray[np.float64], tau: NDArray[np.float64]
) -> NDArray[np.float64]:
    """P(y = k) for k = 1..K, one row per eta."""
    cumulative = expit(tau[None, :] - eta[:, None])  # P(y <= k), k = 1..K-1
    ones = np.ones((len(eta), 1))
    zeros = np.zeros((len(eta), 1))
    return np.diff(np.hstack([zeros, cumulative, ones]), axis=1)


def expected_rating(eta: NDArray[np.float64], tau: NDArray[np.float64]) -> NDArray[np.float64]:
    """E[y] = K - sum_k P(y <= k) on the 1..K scale."""
    eta = np.asarray(eta, dtype=np.float64)
    result = np.full(eta.shape, float(len(tau) + 1))
    for threshold in tau:
        result -= expit(threshold - eta)
    return result


def identified_parameters(table: RatingTable, *, thresholds: int) -> int:
    """Parameters the likelihood identifies (for AIC/BIC): rated items + rated raters +
    thresholds, less the directions it leaves free. Each connected part of the item-rater graph
    can shift its items and raters together (eta = theta - beta unchanged), and every item can
    shift together with every threshold (tau - eta unchanged): parts + 1 directions, so a
    connected campaign has items + raters + thresholds - 2."""
    if len(table) == 0:
        return 0
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    # Graph nodes: the rated items, then the rated raters (positions by a running count).
    item_rated = np.bincount(table.item, minlength=table.items) > 0
    rater_rated = np.bincount(table.rater, minlength=table.raters) > 0
    item_node = np.cumsum(item_rated) - 1
    rater_node = int(item_rated.sum()) + np.cumsum(rater_rated) - 1
    nodes = int(item_rated.sum() + rater_rated.sum())
    graph = coo_matrix(
        (np.ones(len(table)), (item_node[table.item], rater_node[table.rater])),
        shape=(nodes, nodes),
    )
    parts, _ = connected_components(graph, directed=False)
    return nodes + thresholds - int(parts) - 1


def calibration_fit(
    table: RatingTable, *, settings: CalibrationSettings | None = None
) -> CalibrationFit:
    """Fit the model to `table`; see the module docstring for the model and the estimates."""
    settings = settings or CalibrationSettings()
    started = time.perf_counter()
    objective = _Objective(table, settings)
    # Every sum below in the objective's (item, rater) order too, so that the standard errors
    # and fit statistics of a re-fit do not depend on the order the ratings were read in
    # (a judgment row rewritten in place keeps its position, one rewritten elsewhere moves).
    table = RatingTable(
        item=objective.item,
        rater=objective.rater,
        value=objective.value,
        items=table.items,
        raters=table.raters,
        categories=table.categories,
    )
    item_ratings = np.bincount(table.item, minlength=table.items).astype(np.int64)
    rater_ratings = np.bincount(table.rater, minlength=table.raters).astype(np.int64)
    rated_items, rated_raters = item_ratings > 0, rater_ratings > 0
    result = objective_minimize(objective, _initial(table, objective), settings)
    theta, beta, tau = _centred_parameters(objective, result.x, rated_raters)
    errors = _laplace_errors(table, (theta, beta, tau), settings)
    quality_se, severity_se = errors.quality_se, errors.severity_se
    calibrated = expected_rating(theta, tau)
    calibrated_se = errors.calibrated_se
    residuals = _Residuals.of(table, theta, beta, tau, item_ratings, rater_ratings)
    infit, outfit, raw_mean, rater_mean = (
        residuals.infit,
        residuals.outfit,
        residuals.raw_mean,
        residuals.rater_mean,
    )
    for array in (theta, quality_se, calibrated, calibrated_se, raw_mean):
        array[~rated_items] = np.nan
    for array in (beta, severity_se, infit, outfit, rater_mean):
        array[~rated_raters] = np.nan
    statistics = fit_statistics(
        model=MODEL_NAME,
        judgments=len(table),
        categories=table.categories,
        loglik=residuals.loglik,
        parameters=identified_parameters(table, thresholds=len(tau)),
        beta=beta[rated_raters],
        beta_se=severity_se[rated_raters],
        infit=infit[rated_raters],
        outfit=outfit[rated_raters],
        outfit_all=residuals.outfit_all,
        infit_all=residuals.infit_all,
        calibrated=calibrated[rated_items],
        raw_mean=raw_mean[rated_items],
        tau=tau,
        result=result,
        evaluations=objective.evaluations,
        settings=settings.as_dict(),
        seconds=time.perf_counter() - started,
    )
    return CalibrationFit(
        quality=theta,
        quality_se=quality_se,
        calibrated=calibrated,
        calibrated_se=calibrated_se,
        raw_mean=raw_mean,
        item_ratings=item_ratings,
        severity=beta,
        severity_se=severity_se,
        rater_ratings=rater_ratings,
        rater_mean=rater_mean,
        infit=infit,
        outfit=outfit,
        thresholds=tau,
        statistics=statistics,
    )


def _centred_parameters(
    objective: _Objective, solution: NDArray[np.float64], rated_raters: NDArray[np.bool_]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    x = solution / objective.scale
    theta, beta, tau = (part.copy() for part in objective.unpack(x))
    # Centre the severities of the raters with ratings; theta moves with them (eta unchanged).
    shift = float(beta[rated_raters].mean()) if rated_raters.any() else 0.0
    beta -= shift
    theta -= shift
    return theta, beta, tau


def _laplace_errors(
    table: RatingTable,
    parameters: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]],
    settings: CalibrationSettings,
) -> LaplaceErrors:
    from threadpoolctl import threadpool_limits

    from annotation.quality.calibration_covariance import laplace_errors

    priors = (settings.quality_prior_sd, settings.severity_prior_sd, settings.threshold_prior_sd)
    with threadpool_limits(limits=1, user_api="blas"):
        return laplace_errors(
            table.item,
            table.rater,
            table.value,
            parameters,
            shape=(table.items, table.raters),
            prior_sd=priors,
        )


@dataclass
class _Residuals:
    """Residual fit statistics per rater (Rasch infit / outfit mean squares), the raw means and
    the log-likelihood of the fitted model."""

    infit: NDArray[np.float64]
    outfit: NDArray[np.float64]
    infit_all: float
    outfit_all: float
    raw_mean: NDArray[np.float64]
    rater_mean: NDArray[np.float64]
    loglik: float

    @classmethod
    def of(
        cls,
        table: RatingTable,
        theta: NDArray[np.float64],
        beta: NDArray[np.float64],
        tau: NDArray[np.float64],
        item_ratings: NDArray[np.int64],
        rater_ratings: NDArray[np.int64],
    ) -> _Residuals:
        items, raters = table.items, table.raters
        eta = theta[table.item] - beta[table.rater]
        probabilities = _category_probabilities(eta, tau)
        levels = np.arange(1, table.categories + 1, dtype=np.float64)
        expected = np.einsum("nk,k->n", probabilities, levels)
        variance = np.maximum(np.einsum("nk,k->n", probabilities, levels**2) - expected**2, 1e-12)
        squared = (table.value - expected) ** 2
        with np.errstate(invalid="ignore", divide="ignore"):
            outfit = np.bincount(table.rater, weights=squared / variance, minlength=raters) / (
                rater_ratings
            )
            infit = np.bincount(table.rater, weights=squared, minlength=raters) / np.bincount(
                table.rater, weights=variance, minlength=raters
            )
            raw_mean = (
                np.bincount(table.item, weights=table.value, minlength=items) / item_ratings
            ).astype(np.float64)
            rater_mean = np.bincount(table.rater, weights=table.value, minlength=raters) / (
                rater_ratings
            )
        observed = probabilities[np.arange(len(table)), table.value - 1]
        return cls(
            infit=infit,
            outfit=outfit,
            infit_all=float(squared.sum() / variance.sum()) if len(table) else float("nan"),
            outfit_all=float((squared / variance).mean()) if len(table) else float("nan"),
            raw_mean=raw_mean,
            rater_mean=rater_mean,
            loglik=float(np.log(np.clip(observed, 1e-300, None)).sum()),
        )
