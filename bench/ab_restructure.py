"""Before/after the restructuring (issue 13): the crowd flow, QC and the release build, alternating
the tree before it (A) and the current tree (B) in one invocation: A, B, A, B, A, B.

    python bench/ab_restructure.py --base /work/wt/base --rounds 3

(it takes /tmp/lepus-bench.lock itself for the whole run; run it as root: the crowd flow starts a
private PostgreSQL cluster as user postgres).

Each benchmark script runs unchanged from its own tree, in that tree's folder, with that tree's
database name (`--base-database-url`, default database `lepus_base`; the current tree uses
DATABASE_URL), so the two sides never share a scratch database:

* crowd flow: `bench/load_workers.py --compare label-studio --systems lepus --workers W
  --duration D --json` (its own private PostgreSQL cluster, Redis, gunicorn 3 x 4 and one Celery
  worker, a fresh campaign of C clips x 3 candidates; a saturated closed loop of W workers);
* QC: `bench/qc_scale.py --judgments N --json` (a cold run, every aggregate stale, and a warm run);
* release: `bench/release_scale.py --judgments N --reuse --keep` (one build, all three formats).

Before the timed rounds each tree gets one untimed preparation run of QC and of the release
(the data load / generation, and the first release of the scratch database, so every timed
release has one previous release to compare with and every timed QC run follows a reset).
The scratch databases are dropped at the end unless --keep-data.

The tree before the restructuring has no bench/provenance.py: its scripts run as they are and their
--json output is parsed. This script writes one raw file through provenance.write_raw with every
run's figures, the load average around each run, and per figure the median, min and max of each
side, the B/A ratio of the medians and the noise (the spread of the A runs, (max - min) / median).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

BENCH_DIR = Path(__file__).resolve().parent
CURRENT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from provenance import write_raw  # noqa: E402

LOCK = "/tmp/lepus-bench.lock"
BENCHMARKS = ("crowd", "qc", "release")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def with_database(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


def _load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def run_script(
    tree: Path, database_url: str, arguments: list[str], *, timeout: float, raw_dir: Path
) -> tuple[str, str, float]:
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url
    # The current tree's scripts write their own raw file (provenance.py) into this run's folder.
    env["LEPUS_BENCH_RESULTS"] = str(raw_dir)
    command = [sys.executable, str(tree / "bench" / arguments[0]), *arguments[1:]]
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"{' '.join(command)} failed in {tree} (exit {done.returncode})")
    return done.stdout, done.stderr, seconds


def _raw_file(stderr: str) -> str | None:
    for line in stderr.splitlines():
        if line.startswith("raw result: "):
            return line.removeprefix("raw result: ").strip()
    return None


def crowd_figures(stdout: str) -> dict[str, Any]:
    report = json.loads(stdout.strip().splitlines()[-1])
    run = report["runs"][0]
    return {
        "cycles": run["cycles"],
        "cycles_per_s": run["cycles_per_s"],
        "server_cpu_ms_per_cycle": run["server_cpu_ms_per_cycle"],
        "server_cpu_ms_per_cycle_by_tree": run["server_cpu_ms_per_cycle_by_tree"],
        "next_p50_ms": run["next"]["p50_ms"],
        "next_p95_ms": run["next"]["p95_ms"],
        "submit_p50_ms": run["submit"]["p50_ms"],
        "submit_p95_ms": run["submit"]["p95_ms"],
        "load_generator_cpu_ms_per_cycle": run["load_generator_cpu_ms_per_cycle"],
        "server_peak_pss_mib": run["server_peak_pss_mib"],
        "errors_total": run["errors_total"],
        "correctness_all_zero": run["correctness_all_zero"],
        "background_drain_s": run["background_drain_s"],
    }


def qc_figures(stdout: str) -> dict[str, Any]:
    report = json.loads(stdout.strip().splitlines()[-1])
    figures: dict[str, Any] = {}
    for name in ("cold", "warm"):
        run = report[name]
        figures[f"{name}_seconds"] = run["seconds"]
        figures[f"{name}_peak_rss_mb"] = run["peak_rss_mb"]
        figures[f"{name}_phases"] = run["phases"]
        figures[f"{name}_results"] = {
            key: run[key]
            for key in (
                "excluded_workers",
                "judgments_excluded",
                "review_items",
                "candidates_updated",
                "alpha",
            )
        }
    return figures


def release_figures(stdout: str) -> dict[str, Any]:
    result = json.loads(stdout)
    return {
        "build_wall_seconds": result["build_wall_seconds"],
        "job_seconds": result["job_seconds"],
        "peak_rss_mib": result["peak_rss_mib"],
        "process_cpu_seconds": result["process_cpu_seconds"],
        "postgres_backend_cpu_seconds": result["postgres_backend_cpu_seconds"],
        "status": result["status"],
        "verified": result["verified"],
        "released": result["released"],
        "bytes": result["bytes"],
        "alpha": result["alpha"],
    }


# The figures compared (lower is better for all but cycles_per_s).
COMPARED = {
    "crowd": (
        "cycles_per_s",
        "server_cpu_ms_per_cycle",
        "next_p50_ms",
        "next_p95_ms",
        "submit_p50_ms",
        "submit_p95_ms",
    ),
    "qc": ("cold_seconds", "warm_seconds", "cold_peak_rss_mb", "warm_peak_rss_mb"),
    "release": (
        "build_wall_seconds",
        "peak_rss_mib",
        "process_cpu_seconds",
        "postgres_backend_cpu_seconds",
    ),
}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for benchmark, keys in COMPARED.items():
        summary[benchmark] = {}
        for key in keys:
            sides = {}
            for side in ("A", "B"):
                values = [
                    run["figures"][key]
                    for run in runs
                    if run["benchmark"] == benchmark
                    and run["side"] == side
                    and run["figures"].get(key) is not None
                ]
                sides[side] = (
                    {
                        "values": values,
                        "median": statistics.median(values),
                        "min": min(values),
                        "max": max(values),
                    }
                    if values
                    else None
                )
            entry: dict[str, Any] = {"A": sides["A"], "B": sides["B"]}
            if sides["A"] and sides["B"] and sides["A"]["median"]:
                a, b = sides["A"], sides["B"]
                ratio = b["median"] / a["median"]
                noise = (a["max"] - a["min"]) / a["median"]
                entry["ratio_B_over_A"] = round(ratio, 3)
                entry["noise_A_relative_spread"] = round(noise, 3)
                entry["within_noise"] = abs(ratio - 1) <= noise
                entry["B_median_inside_A_range"] = a["min"] <= b["median"] <= a["max"]
            summary[benchmark][key] = entry
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=Path("/work/wt/base"), help="tree A")
    parser.add_argument("--current", type=Path, default=CURRENT, help="tree B")
    parser.add_argument("--base-database-url", default=None, help="default: database lepus_base")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    parser.add_argument("--qc-judgments", type=int, default=100_000)
    parser.add_argument("--release-judgments", type=int, default=100_000)
    parser.add_argument("--crowd-workers", type=int, default=4)
    parser.add_argument("--crowd-duration", type=float, default=20)
    parser.add_argument("--crowd-clips", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=900, help="per benchmark invocation")
    parser.add_argument("--keep-data", action="store_true", help="keep the scratch databases")
    parser.add_argument("--notes", default="")
    args = parser.parse_args()
    benchmarks = [name.strip() for name in args.benchmarks.split(",") if name.strip()]

    current_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lepus")
    base_url = args.base_database_url or with_database(current_url, "lepus_base")
    trees = {
        "A": (args.base.resolve(), base_url),
        "B": (args.current.resolve(), current_url),
    }
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    raw_dir = CURRENT / "bench" / "results" / f"ab_restructure_{stamp}"
    raw_dir.mkdir(parents=True, exist_ok=True)

    commands = {
        "crowd": [
            "load_workers.py",
            "--compare",
            "label-studio",
            "--systems",
            "lepus",
            "--workers",
            str(args.crowd_workers),
            "--paced",
            "",
            "--duration",
            str(args.crowd_duration),
            "--clips",
            str(args.crowd_clips),
            "--json",
        ],
        "qc": ["qc_scale.py", "--judgments", str(args.qc_judgments), "--json"],
        "release": [
            "release_scale.py",
            "--judgments",
            str(args.release_judgments),
            "--reuse",
            "--keep",
        ],
    }
    parse = {"crowd": crowd_figures, "qc": qc_figures, "release": release_figures}

    lock = open(LOCK, "a")  # noqa: SIM115  (held for the whole run)
    log(f"waiting for {LOCK}")
    fcntl.flock(lock, fcntl.LOCK_EX)
    log("lock taken")
    started_load = _load()
    preparation: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    try:
        for side, (tree, url) in trees.items():
            if "qc" in benchmarks:
                log(f"prepare {side}: qc data ({tree})")
                _out, _err, seconds = run_script(
                    tree, url, commands["qc"], timeout=args.timeout, raw_dir=raw_dir
                )
                preparation.append({"side": side, "benchmark": "qc", "seconds": round(seconds, 1)})
            if "release" in benchmarks:
                log(f"prepare {side}: release data and a first release ({tree})")
                prepare = [arg for arg in commands["release"] if arg != "--reuse"]
                _out, _err, seconds = run_script(
                    tree, url, prepare, timeout=args.timeout, raw_dir=raw_dir
                )
                preparation.append(
                    {"side": side, "benchmark": "release", "seconds": round(seconds, 1)}
                )
        for round_number in range(1, args.rounds + 1):
            for benchmark in benchmarks:
                for side, (tree, url) in trees.items():
                    before = _load()
                    log(f"round {round_number}: {benchmark} {side} (load {before})")
                    stdout, stderr, seconds = run_script(
                        tree, url, commands[benchmark], timeout=args.timeout, raw_dir=raw_dir
                    )
                    figures = parse[benchmark](stdout)
                    runs.append(
                        {
                            "round": round_number,
                            "benchmark": benchmark,
                            "side": side,
                            "tree": str(tree),
                            "command": [
                                sys.executable,
                                f"bench/{commands[benchmark][0]}",
                                *commands[benchmark][1:],
                            ],
                            "invocation_seconds": round(seconds, 1),
                            "load_average_before": before,
                            "load_average_after": _load(),
                            "raw_file": _raw_file(stderr),
                            "figures": figures,
                        }
                    )
                    # Kept as it goes: a run cut short still leaves its figures.
                    (raw_dir / "progress.json").write_text(json.dumps(runs, indent=1) + "\n")
                    shown = {key: figures.get(key) for key in COMPARED[benchmark]}
                    log(f"  {shown}")
    finally:
        if not args.keep_data:
            drop_scratch(trees, args)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()

    summary = summarise(runs)
    report = {
        "what": "issue 13: crowd flow, QC and release benchmarks before (A) and after (B) the "
        "restructuring, alternating A, B per benchmark and round",
        "sides": {
            side: {"tree": str(tree), "database": urlparse(url).path.lstrip("/"), **git_of(tree)}
            for side, (tree, url) in trees.items()
        },
        "scale": {
            "qc_judgments": args.qc_judgments,
            "release_judgments": args.release_judgments,
            "crowd": {
                "workers": args.crowd_workers,
                "duration_s": args.crowd_duration,
                "clips": args.crowd_clips,
                "mode": "saturated closed loop",
            },
        },
        "load_average_at_start_of_rounds": started_load,
        "load_average_at_end_of_rounds": _load(),
        "preparation": preparation,
        "runs": runs,
        "summary": summary,
        "noise_definition": "noise = (max - min) / median of the A runs; a figure is within noise "
        "when |B median / A median - 1| <= noise",
    }
    path = write_raw(
        "ab_restructure",
        report,
        database=current_url,
        notes=args.notes or None,
        directory=raw_dir.parent,
    )
    print(json.dumps({"raw_file": str(path), "summary": summary}, indent=2))


def git_of(tree: Path) -> dict[str, Any]:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    status = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {"commit": done.stdout.strip(), "dirty": bool(status.stdout.strip())}


def drop_scratch(trees: dict[str, tuple[Path, str]], args: argparse.Namespace) -> None:
    import psycopg2

    for _side, (_tree, url) in trees.items():
        name = urlparse(url).path.lstrip("/")
        scratch = [f"{name}_qcbench", f"{name}_bench_release"]
        if args.release_judgments != 1_000_000:
            scratch[1] += f"_{args.release_judgments}"
        with contextlib.suppress(Exception):
            admin = psycopg2.connect(with_database(url, "postgres"))
            admin.autocommit = True
            with admin.cursor() as cursor:
                for database in scratch:
                    cursor.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.close()
            log(f"dropped {', '.join(scratch)}")


if __name__ == "__main__":
    main()
