"""Rater-severity calibration at scale: the calibration job's computation (`calibration_campaign`:
read the kept judgments with one COPY, fit the ordinal model per question, store every severity
and calibrated score) over 1,000,000 judgments of 333,333 candidates by 10,000 workers with
planted severities, on PostgreSQL.

    python bench/calibration_scale.py                     # load (if needed) + 3 measured runs
    python bench/calibration_scale.py --judgments 30000   # a small version while developing
    flock /tmp/lepus-bench.lock python bench/calibration_scale.py --output bench/results/x.json

Data is generated inside PostgreSQL (INSERT ... SELECT FROM generate_series) into its own database
`<your database>_calbench`: every candidate has a true quality (about N(0, 1) logits) and every
worker a planted severity (uniform in [-1.4, 1.4] logits, sd 0.81); each of the three questions
is drawn independently from the cumulative-logit model with thresholds (-2.2, -0.8, 0.6, 2.0).
The truth is kept in a table `bench_truth` so each run can also report how well the fit
recovered it. Each measured run is a fresh child process (its peak RSS is the run's own): one cold
run (no stored calibration: everything inserted), then `--runs` warm runs (a re-run on the same
judgments: the fit is deterministic, nothing changes, nothing is written); the report gives the
median of the warm runs with their min and max, and every run's figures.

    python bench/calibration_scale.py --optimizers        # the optimiser comparison (no database)

`--optimizers` times the fit's optimiser alone on 1,000,000 simulated judgments (333,333 items x
3 ratings, 10,000 raters, `annotation.quality.calibration_simulation`): scipy's L-BFGS-B as the
module runs it (BLAS held to one thread) against the hand-written L-BFGS it replaced (kept below,
`handwritten_lbfgs`, as it was in the module), in `--runs` rounds whose order alternates, each on
a fresh objective from the same start; then the exact Laplace covariance step at that size. The
raw file holds every run, the medians, the load average around each run and the versions.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SLUG = "calibration-bench"
THRESHOLDS = (-2.2, -0.8, 0.6, 2.0)


from provenance import write_raw  # noqa: E402  (Django-free; records commit, machine, versions)
from worlds import (  # noqa: E402
    bench_database_url,
    campaign_skeleton,
    insert_select,
    load_unless_loaded,
    run_child,
    setup_django,
)


def _severity_sql(worker: str) -> str:
    """The planted severity of worker number `worker` (1-based), uniform in [-1.4, 1.4]."""
    return f"((mod({worker}::bigint * 7919, 1001) - 500) / 500.0 * 1.4)"


def load(*, judgments: int, workers: int) -> dict[str, Any]:
    from django.db import connection

    from annotation.models import Judgment

    started = time.perf_counter()
    campaign, candidates = campaign_skeleton(
        campaign_fields={"slug": SLUG, "name": "Calibration benchmark"},
        judgments=judgments,
        workers=workers,
        systems=1,
        prefix="cal",
        seed=0.17,
    )
    clips = candidates // 3
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_truth")
        # Irwin-Hall: the sum of three uniforms, centred and scaled to sd 1.
        cursor.execute(
            "CREATE TABLE bench_truth AS SELECT g AS candidate, "
            "(random() + random() + random() - 1.5) * 2.0 AS quality "
            "FROM generate_series(1, %s) AS g",
            [candidates],
        )
        cursor.execute("ALTER TABLE bench_truth ADD PRIMARY KEY (candidate)")

    def rating() -> str:
        eta = f"(t.quality - {_severity_sql('w')})"
        steps = " + ".join(
            f"(CASE WHEN u > 1.0 / (1.0 + exp({eta} - ({threshold}))) THEN 1 ELSE 0 END)"
            for threshold in THRESHOLDS
        )
        return f"(SELECT 1 + {steps} FROM (SELECT random() AS u) AS draw)"

    values = (
        "jsonb_build_object("
        + ", ".join(f"'{key}', {rating()}" for key in ("descriptiveness", "relevance", "fluency"))
        + ")"
    )
    insert_select(
        Judgment,
        {
            "campaign_id": str(campaign.pk),
            "campaign_candidate_id": "c",
            "participation_id": "w",
            "values": values,
            "source": "'crowd'",
            "server_ms": "6000 + (random() * 20000)::int",
            "created_at": "now()",
        },
        f"(SELECT pairs.c, pairs.w, t.quality FROM (SELECT c, 1 + mod(c::bigint * 7919 + s * "
        f"3331, {workers})::int AS w FROM generate_series(1, %s) AS c, generate_series(0, 2) AS s)"
        f" AS pairs JOIN bench_truth t ON t.candidate = pairs.c) AS t(c, w, quality)",
        [candidates],
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {
        "clips": clips,
        "candidates": candidates,
        "judgments": candidates * 3,
        "workers": workers,
        "load_seconds": round(time.perf_counter() - started, 1),
    }


def measured_run() -> dict[str, Any]:
    """One calibration in this process, then (untimed) how well it recovered the truth."""
    import numpy as np
    from django.db import connection

    from annotation.models import Campaign, CandidateCalibration, WorkerSeverity
    from annotation.quality.calibration_job import calibration_campaign

    campaign = Campaign.objects.get(slug=SLUG)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    cpu_started = time.process_time()
    summary = calibration_campaign(campaign=campaign)
    seconds = time.perf_counter() - started
    # This process's CPU time (the fits, the COPY decoding); PostgreSQL's is not included.
    cpu_seconds = time.process_time() - cpu_started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    # Recovery (not timed): planted vs estimated severities (participation id = worker number),
    # calibrated scores and raw means vs the true qualities.
    recovery: dict[str, Any] = {}
    for key in campaign.question_keys:
        rows = list(
            WorkerSeverity.objects.filter(
                participation__campaign=campaign, question_key=key
            ).values_list("participation_id", "severity")
        )
        ids = np.array([row[0] for row in rows], dtype=np.float64)
        estimated = np.array([row[1] for row in rows])
        planted = (np.mod(ids.astype(np.int64) * 7919, 1001) - 500) / 500.0 * 1.4
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT t.quality, avg((j.values->>%s)::float8), (cal.scores->>%s)::float8 "
                f"FROM annotation_judgment j JOIN annotation_campaigncandidate cc "
                f"ON cc.id = j.campaign_candidate_id JOIN bench_truth t ON t.candidate = "
                f"cc.candidate_id JOIN {CandidateCalibration._meta.db_table} cal "
                f"ON cal.campaign_candidate_id = cc.id WHERE j.campaign_id = %s "
                f"GROUP BY cc.id, t.quality, cal.scores",
                [key, key, campaign.pk],
            )
            truth, raw, calibrated = (
                np.array(column) for column in zip(*cursor.fetchall(), strict=True)
            )
        recovery[key] = {
            "severity_pearson": round(float(np.corrcoef(estimated, planted)[0, 1]), 4),
            "calibrated_vs_truth_pearson": round(float(np.corrcoef(calibrated, truth)[0, 1]), 4),
            "raw_mean_vs_truth_pearson": round(float(np.corrcoef(raw, truth)[0, 1]), 4),
        }
    return {
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "peak_rss_mb": round(peak / 1024, 1),
        "rss_before_run_mb": round(rss_before / 1024, 1),
        "judgments": summary["judgments"],
        "workers": summary["workers"],
        "candidates": summary["candidates"],
        "severities": summary["severities"],
        "phases": summary["timings"],
        "fits": {
            key: {
                name: fit[name]
                for name in (
                    "iterations",
                    "evaluations",
                    "converged",
                    "seconds",
                    "severity_sd",
                    "severity_reliability",
                    "infit_mean_square",
                    "outfit_mean_square",
                    "thresholds",
                )
            }
            for key, fit in summary["questions"].items()
        },
        "recovery": recovery,
    }


# ------------------------------------------------------------------------------------------------
# --optimizers: scipy's L-BFGS-B against the hand-written L-BFGS the module used before.
# ------------------------------------------------------------------------------------------------


def handwritten_lbfgs(
    function: Any,
    start: Any,
    *,
    max_iterations: int,
    relative_tolerance: float,
    gradient_tolerance: float,
    memory: int = 10,
) -> dict[str, Any]:
    """The L-BFGS (two-loop recursion, backtracking Armijo line search) that
    annotation/quality/calibration.py carried until the optimiser comparison, unchanged in what it
    computes; kept here so the comparison can be re-run."""
    import numpy as np

    from annotation.quality.calibration import _dot

    def two_loop(gradient: Any, steps: list[Any], changes: list[Any]) -> Any:
        q = gradient.copy()
        if not steps:
            return q
        alphas = []
        rhos = [1.0 / _dot(y, s) for s, y in zip(steps, changes, strict=True)]
        for s, y, rho in zip(reversed(steps), reversed(changes), reversed(rhos), strict=True):
            alpha = rho * _dot(s, q)
            q -= alpha * y
            alphas.append(alpha)
        q *= _dot(steps[-1], changes[-1]) / _dot(changes[-1], changes[-1])
        for s, y, rho, alpha in zip(steps, changes, rhos, reversed(alphas), strict=True):
            q += (alpha - rho * _dot(y, q)) * s
        return q

    x = np.array(start, dtype=np.float64)
    value, gradient = function(x)
    steps: list[Any] = []
    changes: list[Any] = []
    message, converged, iteration = "iteration limit reached", False, 0
    for iteration in range(1, max_iterations + 1):
        direction = -two_loop(gradient, steps, changes)
        slope = _dot(gradient, direction)
        if slope >= 0:
            steps.clear()
            changes.clear()
            direction = -gradient
            slope = -_dot(gradient, gradient)
        step = 1.0
        while True:
            candidate = x + step * direction
            new_value, new_gradient = function(candidate)
            if np.isfinite(new_value) and new_value <= value + 1e-4 * step * slope:
                break
            step *= 0.5
            if step < 1e-12:
                return {
                    "x": x,
                    "value": value,
                    "iterations": iteration,
                    "converged": False,
                    "message": "line search failed",
                }
        s_step = candidate - x
        y_change = new_gradient - gradient
        if _dot(s_step, y_change) > 1e-12 * _dot(y_change, y_change):
            steps.append(s_step)
            changes.append(y_change)
            if len(steps) > memory:
                steps.pop(0)
                changes.pop(0)
        decrease = value - new_value
        x, value, gradient = candidate, new_value, new_gradient
        if float(np.abs(gradient).max()) <= gradient_tolerance:
            converged, message = True, "gradient below tolerance"
            break
        if decrease <= relative_tolerance * max(abs(value), 1.0):
            converged, message = True, "relative decrease below tolerance"
            break
    return {
        "x": x,
        "value": value,
        "iterations": iteration,
        "converged": converged,
        "message": message,
    }


def _timed_optimiser(name: str, table: Any, settings: Any) -> tuple[dict[str, Any], Any]:
    import os

    import numpy as np

    from annotation.quality.calibration import _initial, _Objective, objective_minimize

    objective = _Objective(table, settings)
    start = _initial(table, objective)
    load_before = [round(value, 2) for value in os.getloadavg()]
    wall, cpu = time.perf_counter(), time.process_time()
    if name == "scipy_lbfgsb":
        result = objective_minimize(objective, start, settings)
        x, value, iterations = result.x, result.value, result.iterations
        converged, message = result.converged, result.message
    else:
        outcome = handwritten_lbfgs(
            objective,
            start,
            max_iterations=settings.max_iterations,
            relative_tolerance=settings.relative_tolerance,
            gradient_tolerance=settings.gradient_tolerance,
        )
        x, value, iterations = outcome["x"], outcome["value"], outcome["iterations"]
        converged, message = outcome["converged"], outcome["message"]
    figures = {
        "optimizer": name,
        "seconds": round(time.perf_counter() - wall, 3),
        "cpu_seconds": round(time.process_time() - cpu, 3),
        "objective": round(float(value), 4),
        "iterations": int(iterations),
        "evaluations": objective.evaluations,
        "converged": bool(converged),
        "message": message,
        "load_average_before": load_before,
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }
    return figures, np.asarray(x) / objective.scale


def optimizer_comparison(*, judgments: int, workers: int, runs: int) -> dict[str, Any]:
    import os
    from importlib import metadata

    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    from annotation.quality.calibration import CalibrationSettings, calibration_fit
    from annotation.quality.calibration_simulation import ratings_simulate

    simulation = ratings_simulate(
        items=judgments // 3, raters=workers, severity_sd=0.8, thresholds=THRESHOLDS, seed=17
    )
    table, settings = simulation.table, CalibrationSettings()
    order = ["handwritten_lbfgs", "scipy_lbfgsb"]
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
    solutions: dict[str, Any] = {}
    for round_index in range(runs):
        for name in order if round_index % 2 == 0 else order[::-1]:
            figures, solution = _timed_optimiser(name, table, settings)
            figures["round"] = round_index
            measured[name].append(figures)
            solutions[name] = solution
    medians = {name: statistics.median(run["seconds"] for run in measured[name]) for name in order}
    # The whole fit (optimiser, exact Laplace covariance, fit statistics) as the job runs it.
    fits = []
    for _ in range(runs):
        load_before = [round(value, 2) for value in os.getloadavg()]
        wall = time.perf_counter()
        fit = calibration_fit(table, settings=settings)
        fits.append(
            {
                "seconds": round(time.perf_counter() - wall, 3),
                "optimizer_iterations": fit.statistics["iterations"],
                "load_average_before": load_before,
                "load_average_after": [round(value, 2) for value in os.getloadavg()],
            }
        )
    with threadpool_limits(limits=1, user_api="blas"):
        pinned = threadpool_info()
    return {
        "judgments": len(table),
        "items": table.items,
        "raters": table.raters,
        "variables": table.items + table.raters + table.categories - 1,
        "runs_each": runs,
        "order": "alternated: handwritten first in even rounds, scipy first in odd rounds",
        "runs": measured,
        "median_seconds": medians,
        "handwritten_speedup": round(medians["scipy_lbfgsb"] / medians["handwritten_lbfgs"], 3),
        "keep_handwritten_threshold": 1.5,
        "solutions_max_abs_difference": round(
            float(np.abs(solutions["scipy_lbfgsb"] - solutions["handwritten_lbfgs"]).max()), 6
        ),
        "full_fit_runs": fits,
        "full_fit_median_seconds": statistics.median(fit["seconds"] for fit in fits),
        "blas_during_fit": [
            {key: entry.get(key) for key in ("internal_api", "num_threads", "version", "filepath")}
            for entry in pinned
        ],
        "library_versions": {
            name: metadata.version(name) for name in ("numpy", "scipy", "threadpoolctl")
        },
        "cpu_count": os.cpu_count(),
    }


def _child(database_url: str, mode: str, *extra: str) -> dict[str, Any]:
    return run_child(__file__, database_url, mode, *extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judgments", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reload", action="store_true", help="Regenerate the data first.")
    parser.add_argument("--output", default=None, help="Also write the JSON report here.")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--child", choices=["run", "load", "count", "clear"], default=None)
    parser.add_argument(
        "--optimizers",
        action="store_true",
        help="Compare scipy's L-BFGS-B with the hand-written L-BFGS on simulated judgments "
        "(no database); writes bench/results/calibration_optimizers_*.json.",
    )
    options = parser.parse_args()
    if options.optimizers:
        report = optimizer_comparison(
            judgments=options.judgments, workers=options.workers, runs=options.runs
        )
        path = write_raw("calibration_optimizers", report)
        text = json.dumps(report, sort_keys=True, indent=2)
        if options.output:
            Path(options.output).write_text(text + "\n", encoding="utf-8")
        print(text)
        print(f"raw file: {path}", file=sys.stderr)
        return
    database_url = options.database_url or bench_database_url("calbench", "calibration_scale.py")

    if options.child:
        setup_django(database_url)
        if options.child == "run":
            result = measured_run()
        elif options.child == "clear":
            from annotation.models import CandidateCalibration, WorkerSeverity

            CandidateCalibration.objects.filter(campaign__slug=SLUG).delete()
            WorkerSeverity.objects.filter(participation__campaign__slug=SLUG).delete()
            result = {"cleared": True}
        elif options.child == "count":
            from annotation.models import Judgment

            result = {"judgments": Judgment.objects.filter(campaign__slug=SLUG).count()}
        else:
            result = load(judgments=options.judgments, workers=options.workers)
        print(json.dumps(result))
        return

    report: dict[str, Any] = {"database": database_url.rpartition("/")[2]}
    loaded = load_unless_loaded(
        __file__,
        database_url,
        judgments=options.judgments,
        reload=options.reload,
        load_arguments=["--workers", str(options.workers)],
    )
    if loaded is not None:
        report["load"] = loaded
    # Cold: no stored calibration (every severity and score inserted). Warm: a re-run on the same
    # judgments (the fit is deterministic, so nothing changes and nothing is written).
    _child(database_url, "clear")
    report["cold"] = _child(database_url, "run")
    runs = [_child(database_url, "run") for _ in range(options.runs)]
    seconds = [run["seconds"] for run in runs]
    rss = [run["peak_rss_mb"] for run in runs]
    report["runs"] = runs
    report["seconds"] = {
        "median": statistics.median(seconds),
        "min": min(seconds),
        "max": max(seconds),
    }
    report["peak_rss_mb"] = {"median": statistics.median(rss), "min": min(rss), "max": max(rss)}
    report["target_seconds"] = 60
    report["target_met"] = max(seconds) < 60 and report["cold"]["seconds"] < 60
    write_raw("calibration_scale", report, database=database_url)
    text = json.dumps(report, sort_keys=True, indent=2)
    if options.output:
        Path(options.output).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
