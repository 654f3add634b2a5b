"""Benchmark: fixed against adaptive judgment allocation, simulated and replayed (issue 28, point 3).

    nice python bench/adaptive_allocation.py [--seeds 5] [--candidates 4000] [--smoke]
        [--png docs/img/adaptive_allocation.png]

1. The fit. VATEX-EVAL's 18,000 candidates × 3 ratings (data/vatex_eval/, shipped) are fitted with
   the project's rater-severity model (`annotation.quality.calibration.calibration_fit`, a
   cumulative-logit facets model) with the three rating columns as three raters. It gives the
   shared thresholds (the noise of a rating around an item's quality is the model's logistic
   noise cut by them), the severities of the three columns (their standard deviation is the
   planted severity spread; the columns are anonymous slots, not people, so this is the spread
   between slots) and the items' qualities, whose variance less their mean squared standard error
   is the planted quality variance (the empirical distribution, centred and scaled to it).
2. The simulation, per seed: planted qualities, a crowd of raters with planted severities, and for
   every candidate a pool of `maximum` judgments by distinct raters drawn from the fitted model;
   every policy reads the same pool in the same order (common random numbers), so two policies
   differ only by how many of the pool's judgments they buy. The true score is the expected rating
   of an average rater (the calibrated score's definition). A simulated metric scores every
   candidate as truth + normal noise whose level is set so that its Kendall τ_b with the
   3-rater mean equals EMScore's on VATEX-EVAL with 9 references, 0.368 (Rigel paper, Table 2,
   /work/shared/seeds/000_c090a1d314290d2f.txt lines 92-104, as docs/metrics.md quotes it).
   Policies: fixed N (2..5), adaptive (minimum, maximum, disagreement range) and adaptive + metric
   (the same plus a metric-disagreement threshold), all decided by `annotation.allocation`.
   Figures per policy, medians over the seeds: judgments paid per candidate, Krippendorff's α
   (ordinal, `annotation.quality.krippendorff`) of the judgments bought, Pearson r and Kendall τ_b
   of the aggregate (the mean of a candidate's ratings) with the true score, the share of
   candidates the review rule (range ≥ 3) routes to review. An expert's resolution is not
   simulated: a candidate in review keeps its crowd mean.
3. The replay of the real judgments (3 per candidate, within-candidate order shuffled per seed):
   the order in which adaptive allocation (minimum 2, maximum 3, disagreement range 2) asks for
   them — every candidate's first, then second rating, then the third of the candidates it finds
   unsettled, then (past the point where it stops) the rest — against a random order of the third
   ratings, and the correlation with the 3-rater mean each reaches at each budget.

Prints one JSON object, also written as a raw file under bench/results/ (bench/provenance.py).
No database, no Django; CPU only.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
# imported before anything runs: provenance takes the start load average and time at import
import numpy as np  # noqa: E402
from numpy.typing import NDArray  # noqa: E402
from provenance import input_checksums, write_raw  # noqa: E402
from scipy.special import expit  # noqa: E402

from annotation.allocation import (  # noqa: E402
    AdaptivePolicy,
    FixedPolicy,
    Policy,
    allocation_decide,
    rating_range,
)
from annotation.quality.calibration import RatingTable, calibration_fit, expected_rating  # noqa: E402
from annotation.quality.krippendorff import alpha_from_counts, counts_from_ratings  # noqa: E402
from training_bridge.metrics.correlation import correlations  # noqa: E402

DATA = ROOT / "data" / "vatex_eval" / "vid_cans_score_dict.json"
# EMScore, 9 references, Kendall τ_b ×100 on VATEX-EVAL: the Rigel paper's Table 2 (seed file
# lines 92-104), quoted in docs/metrics.md.
METRIC_KENDALL_TARGET = 0.368
RATERS_PER_CANDIDATE_POOL = 5
TARGET_SAVING = 0.25
TARGET_CORRELATION_GAP = 0.005


# ----------------------------------------------------------------------------------------------
# The fit
# ----------------------------------------------------------------------------------------------


def vatex_ratings(path: Path) -> NDArray[np.int64]:
    """The (candidates × 3) ratings of VATEX-EVAL; SystemExit when the file is missing."""
    if not path.exists():
        raise SystemExit(f"input missing: {path} (VATEX-EVAL, shipped in data/vatex_eval/)")
    raw = json.loads(path.read_text())
    rows: list[list[float]] = []
    for clip in raw.values():
        scores = clip["scores"]
        rows.extend(ast.literal_eval(scores) if isinstance(scores, str) else scores)
    return np.rint(np.asarray(rows, dtype=np.float64)).astype(np.int64)


@dataclass(frozen=True)
class Fit:
    thresholds: NDArray[np.float64]
    severity_sd: float
    column_severities: list[float]
    quality_sd: float
    quality_mean: float
    quality_shape: NDArray[np.float64]  # standardised fitted qualities, resampled when planting


def vatex_fit(ratings: NDArray[np.int64]) -> tuple[Fit, dict[str, Any]]:
    candidates, columns = ratings.shape
    table = RatingTable(
        item=np.repeat(np.arange(candidates), columns),
        rater=np.tile(np.arange(columns), candidates),
        value=ratings.reshape(-1),
        items=candidates,
        raters=columns,
    )
    fit = calibration_fit(table)
    quality = fit.quality
    shape = (quality - quality.mean()) / quality.std()
    severities = [float(value) for value in fit.severity]
    real_alpha = _alpha(ratings, np.full(candidates, columns))
    partial = Fit(
        thresholds=np.asarray(fit.thresholds, dtype=np.float64),
        severity_sd=float(np.std(severities, ddof=1)),
        column_severities=severities,
        quality_sd=1.0,
        quality_mean=float(quality.mean()),
        quality_shape=shape,
    )
    # The spread of the qualities is the one whose simulated 3-rater α equals the real one
    # (bisection; α grows with it). The fitted qualities' own spread is no estimate of it: they
    # are MAP estimates from 3 ratings each, shrunk by the prior, with standard errors of the
    # same size as the spread.
    low, high = 0.2, 8.0
    for _ in range(20):
        middle = (low + high) / 2
        trial = replace(partial, quality_sd=middle)
        world = world_simulate(trial, candidates=6000, raters=200, metric_noise=1.0, seed=7)
        alpha = _alpha(world.pool, np.full(len(world.pool), columns)) or 0.0
        if alpha < (real_alpha or 0.0):
            low = middle
        else:
            high = middle
    result = replace(partial, quality_sd=(low + high) / 2)
    observed_variance = float(quality.var())
    noise_variance = float(np.mean(fit.quality_se**2))
    report = {
        "candidates": candidates,
        "ratings": int(ratings.size),
        "model": "annotation.quality.calibration.calibration_fit, the 3 rating columns as 3 raters",
        "thresholds": [round(float(value), 4) for value in fit.thresholds],
        "column_severities": [round(value, 4) for value in severities],
        "column_severity_se": [round(float(value), 4) for value in fit.severity_se],
        "planted_severity_sd": round(result.severity_sd, 4),
        "fitted_quality_variance": round(observed_variance, 4),
        "mean_squared_quality_se": round(noise_variance, 4),
        "planted_quality_sd": round(result.quality_sd, 4),
        "quality_mean": round(result.quality_mean, 4),
        "quality_sd_fitted_by": "simulated 3-rater alpha = real alpha (bisection, 6000 candidates, seed 7)",
        "real_alpha_ordinal": real_alpha,
        "real_rating_shares": _shares(ratings.reshape(-1)),
        "real_range_shares": _range_shares(ratings),
    }
    return result, report


def _shares(values: NDArray[np.int64]) -> list[float]:
    return [round(float(share), 4) for share in np.bincount(values, minlength=6)[1:] / len(values)]


def _range_shares(ratings: NDArray[np.int64]) -> list[float]:
    spread = ratings.max(axis=1) - ratings.min(axis=1)
    return [round(float(share), 4) for share in np.bincount(spread, minlength=5) / len(spread)]


def _alpha(pool: NDArray[np.int64], bought: NDArray[np.int64]) -> float | None:
    """Ordinal α of the first `bought[i]` ratings of each row of `pool`."""
    taken = np.arange(pool.shape[1])[None, :] < bought[:, None]
    item = np.nonzero(taken)[0]
    counts = counts_from_ratings(item, pool[taken], items=len(pool))
    alpha = alpha_from_counts(counts, level="ordinal")
    return None if alpha is None else round(alpha, 4)


# ----------------------------------------------------------------------------------------------
# The simulation
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    pool: NDArray[np.int64]  # candidates × pool size, in the order they are bought
    truth: NDArray[np.float64]  # expected rating of an average rater, 1..5
    metric: NDArray[np.float64]


def world_simulate(
    fit: Fit, *, candidates: int, raters: int, metric_noise: float, seed: int
) -> World:
    generator = np.random.default_rng(seed)
    shape = generator.choice(fit.quality_shape, size=candidates, replace=True)
    quality = fit.quality_mean + fit.quality_sd * shape
    severity = generator.normal(0.0, fit.severity_sd, raters)
    severity -= severity.mean()
    # Distinct raters per candidate: the first `pool` of a random permutation.
    order = np.argsort(generator.random((candidates, raters)), axis=1)
    rater = order[:, :RATERS_PER_CANDIDATE_POOL]
    eta = quality[:, None] - severity[rater]
    cumulative = expit(fit.thresholds[None, None, :] - eta[:, :, None])
    draw = generator.random(eta.shape)
    pool = 1 + (draw[:, :, None] > cumulative).sum(axis=2)
    truth = expected_rating(quality, fit.thresholds)
    metric = truth + generator.normal(0.0, metric_noise, candidates)
    return World(pool=pool.astype(np.int64), truth=truth, metric=metric)


def bought_by(
    policy: Policy, world: World, *, use_metric: bool
) -> tuple[NDArray[np.int64], list[str]]:
    """How many of its pool's judgments each candidate buys under `policy`, and why it stopped."""
    bought = np.zeros(len(world.pool), dtype=np.int64)
    reasons: list[str] = []
    for index, row in enumerate(world.pool.tolist()):
        count = 0
        while True:
            decision = allocation_decide(
                policy,
                row[:count],
                metric_score=float(world.metric[index]) if use_metric else None,
            )
            if decision.settled:
                break
            count = min(count + decision.more, len(row))
        bought[index] = count
        reasons.append(str(decision.reason))
    return bought, reasons


def figures_of(world: World, bought: NDArray[np.int64], reasons: list[str]) -> dict[str, float]:
    taken = np.arange(world.pool.shape[1])[None, :] < bought[:, None]
    aggregate = (world.pool * taken).sum(axis=1) / bought
    spread = np.asarray(
        [
            rating_range(row[:count])
            for row, count in zip(world.pool.tolist(), bought.tolist(), strict=True)
        ]
    )
    correlation = correlations(aggregate, world.truth)
    return {
        "paid_per_candidate": float(bought.mean()),
        "alpha": float(_alpha(world.pool, bought) or float("nan")),
        "pearson": correlation["pearson"],
        "kendall_b": correlation["kendall_b"],
        "review_share": float(np.mean(spread >= 3)),
        "stopped_settled": reasons.count("settled") / len(reasons),
        "stopped_maximum": reasons.count("maximum") / len(reasons),
        "stopped_review": reasons.count("review") / len(reasons),
        "max_bought": int(bought.max()),
    }


def metric_noise_for(fit: Fit, *, candidates: int, raters: int, seed: int) -> tuple[float, float]:
    """The metric noise whose Kendall τ_b with the 3-rater mean is METRIC_KENDALL_TARGET
    (bisection on one seed's world; τ falls as the noise grows)."""
    low, high = 0.01, 5.0
    tau = float("nan")
    for _ in range(18):
        middle = (low + high) / 2
        world = world_simulate(
            fit, candidates=candidates, raters=raters, metric_noise=middle, seed=seed
        )
        tau = correlations(world.metric, world.pool[:, :3].mean(axis=1))["kendall_b"]
        if tau > METRIC_KENDALL_TARGET:
            low = middle
        else:
            high = middle
    return (low + high) / 2, tau


def policies(*, metric_thresholds: tuple[float, ...]) -> dict[str, tuple[Policy, bool]]:
    """Every policy simulated: name → (policy, whether the metric feeds it)."""
    chosen: dict[str, tuple[Policy, bool]] = {}
    for judgments in (2, 3, 4, 5):
        chosen[f"fixed-{judgments}"] = (FixedPolicy(judgments=judgments), False)
    for minimum, maximum, disagreement in [
        (2, 3, 2), (2, 4, 2), (2, 5, 2), (2, 3, 1), (2, 4, 1), (2, 5, 1), (3, 5, 2), (3, 5, 1),
    ]:  # fmt: skip
        name = f"adaptive-{minimum}-{maximum}-r{disagreement}"
        chosen[name] = (
            AdaptivePolicy(minimum=minimum, maximum=maximum, disagreement_range=disagreement),
            False,
        )
    for minimum, maximum, disagreement in [
        (1, 2, 2), (1, 3, 2), (1, 4, 2), (1, 5, 1), (2, 3, 2), (2, 4, 2), (2, 5, 2), (2, 3, 1),
        (2, 5, 1),
    ]:  # fmt: skip
        for threshold in metric_thresholds:
            name = f"adaptive+metric-{minimum}-{maximum}-r{disagreement}-m{threshold:g}"
            policy = AdaptivePolicy(
                minimum=minimum,
                maximum=maximum,
                disagreement_range=disagreement,
                metric_disagreement_threshold=threshold,
            )
            chosen[name] = (policy, True)
    return chosen


def simulate(
    fit: Fit,
    *,
    seeds: int,
    candidates: int,
    raters: int,
    metric_noise: float,
    metric_thresholds: tuple[float, ...],
) -> dict[str, Any]:
    chosen = policies(metric_thresholds=metric_thresholds)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    checks: list[dict[str, Any]] = []
    for seed in range(seeds):
        world = world_simulate(
            fit, candidates=candidates, raters=raters, metric_noise=metric_noise, seed=1000 + seed
        )
        checks.append(
            {
                "seed": 1000 + seed,
                "fixed3_rating_shares": _shares(world.pool[:, :3].reshape(-1)),
                "fixed3_range_shares": _range_shares(world.pool[:, :3]),
                "metric_kendall_with_3_rater_mean": round(
                    correlations(world.metric, world.pool[:, :3].mean(axis=1))["kendall_b"], 4
                ),
            }
        )
        for name, (policy, use_metric) in chosen.items():
            bought, reasons = bought_by(policy, world, use_metric=use_metric)
            runs[name].append(figures_of(world, bought, reasons))
    summary: dict[str, Any] = {}
    for name, (policy, use_metric) in chosen.items():
        medians = {
            key: round(statistics.median(run[key] for run in runs[name]), 4)
            for key in runs[name][0]
            if key != "max_bought"
        }
        summary[name] = {
            "policy": policy.as_dict(),
            "metric": use_metric,
            "family": "fixed"
            if isinstance(policy, FixedPolicy)
            else ("adaptive+metric" if use_metric else "adaptive"),
            "median": medians,
            "max_bought_any_seed": max(run["max_bought"] for run in runs[name]),
            "runs": runs[name],
        }
    return {"policies": summary, "fit_checks": checks}


def target_verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """The cheapest adaptive policy that reaches fixed-3's Pearson r (within 0.005) and α."""
    reference = summary["fixed-3"]["median"]
    verdict: dict[str, Any] = {"fixed3": reference}
    for family in ("adaptive", "adaptive+metric"):
        reaching = [
            (entry["median"]["paid_per_candidate"], name)
            for name, entry in summary.items()
            if entry["family"] == family
            and entry["median"]["pearson"] >= reference["pearson"] - TARGET_CORRELATION_GAP
            and entry["median"]["alpha"] >= reference["alpha"]
        ]
        if not reaching:
            verdict[family] = {"reaches_fixed3": None, "met": False}
            continue
        paid, name = min(reaching)
        saving = 1 - paid / reference["paid_per_candidate"]
        verdict[family] = {
            "reaches_fixed3": name,
            "paid_per_candidate": paid,
            "saving": round(saving, 4),
            "met": saving >= TARGET_SAVING,
        }
    return verdict


# ----------------------------------------------------------------------------------------------
# The replay of the real judgments
# ----------------------------------------------------------------------------------------------


def replay(ratings: NDArray[np.int64], *, seeds: int) -> dict[str, Any]:
    candidates = len(ratings)
    policy = AdaptivePolicy(minimum=2, maximum=3, disagreement_range=2)
    reference = ratings.mean(axis=1)
    budgets = [1.5, 2.0, 2.1, 2.2, 2.25, 2.3, 2.4, 2.5, 2.6, 2.75, 2.9, 3.0]
    curves: dict[str, dict[str, list[float]]] = {"adaptive": {}, "random": {}}
    stops: dict[str, list[dict[str, float]]] = {"adaptive": [], "random": []}
    for seed in range(seeds):
        generator = np.random.default_rng(2000 + seed)
        # The three columns are anonymous slots: which rating comes first is shuffled.
        order = np.argsort(generator.random(ratings.shape), axis=1)
        shuffled = np.take_along_axis(ratings, order, axis=1)
        decisions = [allocation_decide(policy, row[:2]) for row in shuffled.tolist()]
        unsettled = np.asarray([not decision.settled for decision in decisions])
        third_random = generator.permutation(candidates)
        # Adaptive asks first for the third ratings of the unsettled candidates (the wider the
        # range the sooner, random among equals), then, past its stop, for the rest.
        priority = generator.random(candidates) + np.where(unsettled, 0.0, 10.0)
        third_adaptive = np.argsort(priority, kind="stable")
        second_order = generator.permutation(candidates)
        stop_budget = 2.0 + float(unsettled.mean())
        for name, third in (("adaptive", third_adaptive), ("random", third_random)):
            for budget in [*budgets, stop_budget]:
                bought = np.ones(candidates, dtype=np.int64)
                extra = int(round(budget * candidates)) - candidates
                seconds = second_order[: min(extra, candidates)]
                bought[seconds] = 2
                if extra > candidates:
                    bought[third[: extra - candidates]] = 3
                taken = np.arange(3)[None, :] < bought[:, None]
                aggregate = (shuffled * taken).sum(axis=1) / bought
                correlation = correlations(aggregate, reference)
                if budget == stop_budget:
                    stops[name].append({"budget": stop_budget, **correlation})
                    continue
                key = f"{budget:g}"
                curves[name].setdefault(key, []).append(correlation["pearson"])
                curves[name].setdefault(f"{key}_kendall_b", []).append(correlation["kendall_b"])
    return {
        "policy": policy.as_dict(),
        "order": (
            "every candidate's first rating, then every second rating (random order), then the "
            "third ratings of the candidates the policy finds unsettled after two (range 2; range "
            "≥ 3 stops for review), then the remaining third ratings"
        ),
        "budgets": budgets,
        "median": {
            name: {key: round(statistics.median(values), 4) for key, values in curve.items()}
            for name, curve in curves.items()
        },
        # Where adaptive stops asking (every candidate settled, at maximum or in review), and what
        # the random order reaches with the same budget.
        "at_adaptive_stop": {
            name: {
                key: round(statistics.median(stop[key] for stop in runs), 4)
                for key in ("budget", "pearson", "kendall_b")
            }
            for name, runs in stops.items()
        },
        "seeds": seeds,
    }


# ----------------------------------------------------------------------------------------------
# The plot (Pillow, as bench/scaling_curves.py)
# ----------------------------------------------------------------------------------------------

PAID_LOW, PAID_HIGH = 1.0, 5.2  # the x axis of the plot
COLOURS = {"fixed": (40, 90, 190), "adaptive": (200, 60, 40), "adaptive+metric": (30, 150, 70)}


def plot(summary: dict[str, Any], png: Path, subtitle: str) -> None:
    from PIL import Image, ImageDraw
    from scaling_curves import _font

    image = Image.new("RGB", (1500, 620), "white")
    draw = ImageDraw.Draw(image)
    panels = [
        ("pearson", "Pearson r of the crowd mean with the true score"),
        ("alpha", "Krippendorff's α (ordinal) of the judgments bought"),
    ]
    for number, (key, title) in enumerate(panels):
        left, top, right, bottom = 110 + number * 720, 90, 110 + number * 720 + 560, 480
        values = [entry["median"][key] for entry in summary.values()]
        low, high = min(values) - 0.01, max(values) + 0.01

        def x(paid: float, left: int = left, right: int = right) -> float:
            return left + (paid - PAID_LOW) / (PAID_HIGH - PAID_LOW) * (right - left)

        def y(
            value: float, low: float = low, high: float = high, top: int = top, bottom: int = bottom
        ) -> float:
            return bottom - (value - low) / (high - low) * (bottom - top)

        draw.text((left, top - 50), title, fill="black", font=_font(18))
        draw.rectangle((left, top, right, bottom), outline=(120, 120, 120))
        step = 0.01 if high - low < 0.08 else 0.02 if high - low < 0.2 else 0.05
        tick = np.ceil(low / step) * step
        while tick <= high:
            draw.line((left, y(tick), right, y(tick)), fill=(225, 225, 225))
            draw.text((left - 8, y(tick)), f"{tick:.2f}", fill="black", font=_font(14), anchor="rm")
            tick += step
        for paid in (1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5):
            draw.line((x(paid), top, x(paid), bottom), fill=(225, 225, 225))
            draw.text((x(paid), bottom + 8), f"{paid:g}", fill="black", font=_font(14), anchor="mt")
        draw.text(
            ((left + right) / 2, bottom + 30),
            "judgments paid per candidate",
            fill="black",
            font=_font(14),
            anchor="mt",
        )
        for family, colour in COLOURS.items():
            points = sorted(
                (entry["median"]["paid_per_candidate"], entry["median"][key])
                for entry in summary.values()
                if entry["family"] == family
            )
            frontier: list[tuple[float, float]] = []
            for point in points:  # the best quality reached at or below each cost
                if not frontier or point[1] > frontier[-1][1]:
                    frontier.append(point)
            if family == "fixed":
                frontier = points
            if len(frontier) > 1:
                draw.line([(x(p), y(v)) for p, v in frontier], fill=colour, width=3)
            for paid, value in points:
                draw.ellipse((x(paid) - 5, y(value) - 5, x(paid) + 5, y(value) + 5), fill=colour)
        reference = summary["fixed-3"]["median"][key]
        draw.line((left, y(reference), right, y(reference)), fill=(150, 150, 150), width=1)
    legend_x = 110
    for family, colour in COLOURS.items():
        draw.line((legend_x, 560, legend_x + 30, 560), fill=colour, width=3)
        draw.text((legend_x + 38, 560), family, fill="black", font=_font(16), anchor="lm")
        legend_x += 260
    draw.text(
        (legend_x, 560), "grey: fixed-3; lines: best reached at or below each cost; dots: every policy",
        fill="black", font=_font(16), anchor="lm",
    )  # fmt: skip
    draw.text((110, 6), subtitle, fill=(80, 80, 80), font=_font(15))
    png.parent.mkdir(parents=True, exist_ok=True)
    image.save(png, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=4000)
    parser.add_argument("--raters", type=int, default=200)
    parser.add_argument(
        "--metric-thresholds",
        default="0.75,1.25",
        help="Metric-disagreement thresholds (rating points).",
    )
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument(
        "--png", default=None, help="Draw the plot here (e.g. docs/img/adaptive_allocation.png)."
    )
    parser.add_argument("--smoke", action="store_true", help="A small configuration for the tests.")
    parser.add_argument(
        "--results", default=None, help="Directory of the raw file (default bench/results/)."
    )
    options = parser.parse_args()
    inputs = input_checksums(vatex_eval=options.data)  # a missing file stops the run here
    if options.smoke:
        options.seeds, options.candidates, options.raters = 2, 300, 40
    if options.seeds < 1 or options.candidates < 50 or options.raters < RATERS_PER_CANDIDATE_POOL:
        raise SystemExit("need ≥ 1 seed, ≥ 50 candidates and ≥ 5 raters")

    thresholds = tuple(float(value) for value in options.metric_thresholds.split(","))
    ratings = vatex_ratings(Path(options.data))
    if options.smoke:
        ratings = ratings[:1200]
    fit, fit_report = vatex_fit(ratings)
    metric_noise, metric_tau = metric_noise_for(
        fit, candidates=options.candidates, raters=options.raters, seed=999
    )
    simulation = simulate(
        fit,
        seeds=options.seeds,
        candidates=options.candidates,
        raters=options.raters,
        metric_noise=metric_noise,
        metric_thresholds=thresholds,
    )
    report = {
        "configuration": {
            "seeds": options.seeds,
            "candidates": options.candidates,
            "raters": options.raters,
            "smoke": options.smoke,
            "metric_thresholds": list(thresholds),
            "metric_noise_sd": round(metric_noise, 4),
            "metric_kendall_target": METRIC_KENDALL_TARGET,
            "metric_kendall_reached_seed_999": round(metric_tau, 4),
            "aggregate": "mean of the ratings bought (no expert resolution simulated)",
        },
        "fit": fit_report,
        "simulation": simulation,
        "target": target_verdict(simulation["policies"]),
        "replay": replay(ratings, seeds=options.seeds),
    }
    directory = Path(options.results) if options.results else None
    path = write_raw(
        "adaptive_allocation",
        report,
        directory=directory,
        inputs=inputs,
    )
    if options.png:
        plot(
            simulation["policies"],
            Path(options.png),
            f"Simulated from VATEX-EVAL's fit: {options.candidates} candidates, medians of {options.seeds} seeds ({path.name})",
        )
    compact = {
        "target": report["target"],
        "medians": {name: entry["median"] for name, entry in simulation["policies"].items()},
        "replay": {
            "median": report["replay"]["median"],
            "at_adaptive_stop": report["replay"]["at_adaptive_stop"],
        },
        "fit": {
            key: fit_report[key]
            for key in (
                "thresholds",
                "column_severities",
                "planted_severity_sd",
                "planted_quality_sd",
                "real_alpha_ordinal",
            )
        },
        "raw": str(path),
    }
    print(json.dumps(compact, indent=1))


if __name__ == "__main__":
    main()
