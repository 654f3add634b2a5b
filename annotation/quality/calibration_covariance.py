"""The Laplace covariance of the calibration model, exactly, without forming a 343,000² matrix.

At the posterior mode the covariance of all parameters x = (theta: items, beta: raters,
tau: thresholds) is the inverse of the Hessian H of the negative log posterior. H has an
arrow-shaped structure: no judgment involves two items, so the item block A is diagonal, and
every other parameter (the raters and the K-1 thresholds, R: m = raters + K - 1 of them) is few
next to the items. With C the item-by-R block and D the R-by-R block:

    Sigma_RR = S^-1,                 S = D - C' A^-1 C      (the Schur complement, m x m, dense)
    Sigma_theta,R = -A^-1 C S^-1
    Sigma_theta,theta = A^-1 + A^-1 C S^-1 C' A^-1

so the only inverse is that of the m x m matrix S (a Cholesky factorisation and LAPACK's potri,
in place: 8 m² bytes, about 800 MB and 20 s on one core at 10,000 raters), and every quantity
reported is a short quadratic form in its entries:

- a reported quality is theta_i - mean(beta) (severities are centred after the fit), so with
  u_i = C_i / a_i and w the averaging vector over the rated raters,
  Var = 1/a_i + (u_i + w)' S^-1 (u_i + w);
- a reported severity is beta_j - mean(beta): Var = (e_j - w)' S^-1 (e_j - w);
- the calibrated score E(theta_i - mean(beta), tau) adds the thresholds' uncertainty and their
  covariance with the quality (delta method).

u_i has nonzeros only on the raters of item i and on the thresholds, so the forms need S^-1 only
at pairs of raters who rated the same item (summed pair by pair, in chunks) and at the threshold
rows. Nothing is approximated beyond the Laplace approximation itself; the test compares the
standard errors with the inverse of a finite-difference Hessian.

The second derivatives, per judgment with rating y, eta = theta - beta, u = tau_y - eta,
l = tau_{y-1} - eta and s the logistic function: log P(y) = log s(u) + log s(-l) +
log(1 - exp(l - u)), whose last term depends on the thresholds only. With w_u = s(u)(1 - s(u))
and w_l = s(l)(1 - s(l)) (0 at an open end), minus the log-likelihood has d²/d eta² = w_u + w_l,
d²/d eta d tau_y = -w_u, d²/d eta d tau_{y-1} = -w_l, d²/d tau_y² = w_u + q, d²/d tau_{y-1}²
= w_l + q and d²/d tau_y d tau_{y-1} = -q with q = r / (1 - r)², r = exp(tau_{y-1} - tau_y)
(middle categories only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse
from numpy.typing import NDArray
from scipy.special import expit

# Pairs of judgments of one item summed per chunk (bounds the temporary arrays to ~100 MB).
PAIR_CHUNK = 1 << 22


@dataclass
class LaplaceErrors:
    """Standard errors of the reported (centred) estimates."""

    quality_se: NDArray[np.float64]
    severity_se: NDArray[np.float64]
    calibrated_se: NDArray[np.float64]


def laplace_errors(
    item: NDArray[np.int64],
    rater: NDArray[np.int64],
    value: NDArray[np.int64],
    parameters: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]],
    *,
    shape: tuple[int, int],
    prior_sd: tuple[float, float, float],
) -> LaplaceErrors:
    """Standard errors of theta - mean(beta), beta - mean(beta) (mean over the raters with
    ratings) and of the expected rating, from the full Laplace covariance at `parameters`
    (theta, beta, tau), for `shape` (items, raters) and the prior standard deviations of quality,
    severity and thresholds. `item` must be sorted (the fit's item-major order)."""
    raters = shape[1]
    blocks = _hessian_blocks((item, rater, value), parameters, shape, prior_sd)
    inverse_a = 1.0 / blocks.a
    scaled_raters = blocks.c_raters.multiply(inverse_a[:, None]).tocsr()
    scaled_thresholds = blocks.c_thresholds * inverse_a[:, None]
    covariance = _reduced_covariance(blocks, scaled_raters, scaled_thresholds, raters=raters)
    m = covariance.shape[0]

    rated = np.bincount(rater, minlength=raters) > 0
    average = np.zeros(m)
    average[:raters][rated] = 1.0 / max(int(rated.sum()), 1)
    sigma_average = scipy.linalg.blas.dsymv(1.0, covariance, average, lower=0)
    average_variance = float(average @ sigma_average)
    diagonal = np.diagonal(covariance).copy()

    # Severities: (e_j - w)' Sigma (e_j - w).
    severity_variance = diagonal[:raters] - 2.0 * sigma_average[:raters] + average_variance

    # Items: 1/a_i + (u_i + w)' Sigma (u_i + w) with u_i = C_i / a_i.
    raters_part = _pair_forms(scaled_raters, covariance)  # u_B' Sigma_BB u_B per item
    sigma_rt = covariance[:raters, raters:]  # raters x thresholds
    sigma_tt = _symmetric(covariance[raters:, raters:])
    # u_B' Sigma_BT, per item (K-1 columns), then the cross and threshold terms.
    rater_threshold = _rows_times(scaled_raters, sigma_rt)
    cross = 2.0 * np.einsum("ik,ik->i", rater_threshold, scaled_thresholds)
    thresholds_part = np.einsum("ik,kl,il->i", scaled_thresholds, sigma_tt, scaled_thresholds)
    with_average = 2.0 * (
        _rows_dot(scaled_raters, sigma_average[:raters])
        + scaled_thresholds @ sigma_average[raters:]
    )
    quality_variance = (
        inverse_a + raters_part + cross + thresholds_part + with_average + average_variance
    )

    # Cov(q_i, tau) = -(u_i + w)' Sigma_R,T.
    quality_tau = -(rater_threshold + scaled_thresholds @ sigma_tt + sigma_average[raters:])
    calibrated_variance = _calibrated_variance(
        parameters, rated, quality_variance, quality_tau, sigma_tt
    )
    return LaplaceErrors(
        quality_se=np.sqrt(np.maximum(quality_variance, 0.0)),
        severity_se=np.sqrt(np.maximum(severity_variance, 0.0)),
        calibrated_se=np.sqrt(np.maximum(calibrated_variance, 0.0)),
    )


@dataclass
class _HessianBlocks:
    """The negative log-posterior's Hessian at (theta, beta, tau), in blocks: A (items,
    diagonal), C (items x raters, sparse; items x thresholds, dense) and D (raters and
    thresholds)."""

    a: NDArray[np.floating[Any]]
    c_raters: scipy.sparse.csr_matrix
    c_thresholds: NDArray[np.float64]
    d_raters: NDArray[np.floating[Any]]
    d_rater_thresholds: NDArray[np.float64]
    d_thresholds: NDArray[np.float64]


def _hessian_blocks(
    ratings: tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]],
    parameters: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]],
    shape: tuple[int, int],
    prior_sd: tuple[float, float, float],
) -> _HessianBlocks:
    """The blocks for `ratings` (item, rater, value) at `parameters` (theta, beta, tau), for
    `shape` (items, raters), with the prior standard deviations of quality, severity and
    thresholds."""
    item, rater, value = ratings
    theta, beta, tau = parameters
    items, raters = shape
    quality_prior_sd, severity_prior_sd, threshold_prior_sd = prior_sd
    thresholds = len(tau)
    eta = theta[item] - beta[rater]
    edges = np.concatenate([[-np.inf], tau, [np.inf]])
    s_upper = expit(edges[value] - eta)
    s_lower = expit(edges[value - 1] - eta)
    w_upper = s_upper * (1.0 - s_upper)
    w_lower = s_lower * (1.0 - s_lower)
    weight = w_upper + w_lower

    # A: the diagonal item block.
    a = np.bincount(item, weights=weight, minlength=items) + quality_prior_sd**-2
    # C, item x raters part (c = d² / d theta d beta = -w) as a CSR matrix (a rater who rated an
    # item twice gets the sum), and item x thresholds part T (dense, items x (K-1)).
    c_raters = scipy.sparse.csr_matrix(
        (-weight, (item, rater)), shape=(items, raters), dtype=np.float64
    )
    c_raters.sum_duplicates()
    c_thresholds = _threshold_columns(
        rows=item, count=items, value=value, upper=-w_upper, lower=-w_lower, thresholds=thresholds
    )
    # D: raters (diagonal), raters x thresholds (d² / d beta d tau = +w_u / +w_l), thresholds.
    d_raters = np.bincount(rater, weights=weight, minlength=raters) + severity_prior_sd**-2
    d_rater_thresholds = _threshold_columns(
        rows=rater, count=raters, value=value, upper=w_upper, lower=w_lower, thresholds=thresholds
    )
    d_thresholds = _threshold_block(value=value, w_upper=w_upper, w_lower=w_lower, tau=tau)
    d_thresholds += np.eye(thresholds) * threshold_prior_sd**-2
    return _HessianBlocks(a, c_raters, c_thresholds, d_raters, d_rater_thresholds, d_thresholds)


def _reduced_covariance(
    blocks: _HessianBlocks,
    scaled_raters: scipy.sparse.csr_matrix,
    scaled_thresholds: NDArray[np.float64],
    *,
    raters: int,
) -> NDArray[np.float64]:
    """Sigma_RR, the inverse of S = D - C' A^-1 C (dense, upper triangle used); valid on and
    above the diagonal."""
    m = raters + blocks.d_thresholds.shape[0]
    c_raters, c_thresholds = blocks.c_raters, blocks.c_thresholds
    # Fortran order, so that LAPACK factorises and inverts it in place (no second m x m copy).
    schur = np.zeros((m, m), order="F")
    # C_B' A^-1 C_B is sparse (raters who share an item); subtracted entry by entry so that no
    # second dense m x m array is made.
    shared = (c_raters.T @ scaled_raters).tocoo()
    shared.sum_duplicates()
    schur[shared.row, shared.col] -= shared.data
    del shared
    schur[np.arange(raters), np.arange(raters)] += blocks.d_raters
    schur[:raters, raters:] = blocks.d_rater_thresholds - c_raters.T @ scaled_thresholds
    schur[raters:, :raters] = schur[:raters, raters:].T
    schur[raters:, raters:] = blocks.d_thresholds - c_thresholds.T @ scaled_thresholds
    # The inverse is made in place: the one m x m array is handed over, not kept here.
    return _inverse_upper(schur)


def _calibrated_variance(
    parameters: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]],
    rated: NDArray[np.bool_],
    quality_variance: NDArray[np.float64],
    quality_tau: NDArray[np.float64],
    sigma_tt: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Calibrated score E = K - sum_k s(tau_k - q): dE/dq = sum_k s'(.), dE/dtau_k = -s'(.)."""
    theta, beta, tau = parameters
    shift = float(beta[rated].mean()) if rated.any() else 0.0
    quality = theta - shift
    density = expit(tau[None, :] - quality[:, None])
    density *= 1.0 - density  # items x (K-1)
    slope = density.sum(axis=1)
    return (
        slope**2 * quality_variance
        - 2.0 * slope * np.einsum("ik,ik->i", quality_tau, density)
        + np.einsum("ik,kl,il->i", density, sigma_tt, density)
    )


def _threshold_columns(
    *,
    rows: NDArray[np.int64],
    count: int,
    value: NDArray[np.int64],
    upper: NDArray[np.float64],
    lower: NDArray[np.float64],
    thresholds: int,
) -> NDArray[np.float64]:
    """rows x thresholds: `upper` onto tau_y (y <= K-1) plus `lower` onto tau_{y-1} (y >= 2)."""
    block = np.zeros((count, thresholds))
    for k in range(1, thresholds + 1):
        block[:, k - 1] = np.bincount(
            rows, weights=np.where(value == k, upper, 0.0), minlength=count
        ) + np.bincount(rows, weights=np.where(value == k + 1, lower, 0.0), minlength=count)
    return block


def _threshold_block(
    *,
    value: NDArray[np.int64],
    w_upper: NDArray[np.float64],
    w_lower: NDArray[np.float64],
    tau: NDArray[np.float64],
) -> NDArray[np.float64]:
    thresholds = len(tau)
    block = np.zeros((thresholds, thresholds))
    counts = np.bincount(value, minlength=thresholds + 2)
    for k in range(1, thresholds + 1):
        block[k - 1, k - 1] += float(w_upper[value == k].sum() + w_lower[value == k + 1].sum())
    for y in range(2, thresholds + 1):  # middle categories: the log(1 - exp(l - u)) term
        r = float(np.exp(tau[y - 2] - tau[y - 1]))
        q = counts[y] * r / (1.0 - r) ** 2
        block[y - 1, y - 1] += q
        block[y - 2, y - 2] += q
        block[y - 1, y - 2] -= q
        block[y - 2, y - 1] -= q
    return block


def _inverse_upper(matrix: NDArray[np.float64]) -> NDArray[np.float64]:
    """The inverse of a symmetric positive definite matrix, in place, upper triangle valid."""
    factor, info = scipy.linalg.lapack.dpotrf(matrix, lower=0, overwrite_a=1, clean=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"the Hessian is not positive definite (potrf info {info})")
    inverse, info = scipy.linalg.lapack.dpotri(factor, lower=0, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"potri failed (info {info})")
    return np.asarray(inverse)


def _symmetric(upper: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.triu(upper) + np.triu(upper, 1).T


def _rows_times(matrix: scipy.sparse.csr_matrix, dense: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(matrix @ dense)


def _rows_dot(matrix: scipy.sparse.csr_matrix, vector: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(matrix @ vector).reshape(-1)


def _pair_forms(
    matrix: scipy.sparse.csr_matrix, covariance: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Per row i of `matrix`: sum over its nonzero pairs (j, k) of M_ij M_ik Sigma_jk, reading
    Sigma from its upper triangle; the rows are taken in chunks of about PAIR_CHUNK pairs."""
    rows = matrix.shape[0]
    pointer, columns, data = matrix.indptr, matrix.indices, matrix.data
    lengths = np.diff(pointer)
    result = np.zeros(rows)
    squares = np.cumsum(lengths.astype(np.int64) ** 2)
    start = 0
    while start < rows:
        already = squares[start - 1] if start else 0
        stop = int(np.searchsorted(squares, already + PAIR_CHUNK, side="right"))
        stop = min(max(stop, start + 1), rows)
        # Every nonzero of these rows, repeated once per nonzero of its row (its partners).
        row_of_nonzero = np.repeat(np.arange(start, stop), lengths[start:stop])
        partners = lengths[row_of_nonzero]
        first = np.repeat(np.arange(pointer[start], pointer[stop]), partners)
        row = np.repeat(row_of_nonzero, partners)
        block_start = np.repeat(np.cumsum(partners) - partners, partners)
        second = pointer[row] + np.arange(len(first)) - block_start
        low = np.minimum(columns[first], columns[second])
        high = np.maximum(columns[first], columns[second])
        terms = data[first] * data[second] * covariance[low, high]
        result[start:stop] = np.bincount(row - start, weights=terms, minlength=stop - start)
        start = stop
    return result
