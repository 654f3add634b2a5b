"""Fault figures for docs/benchmarks.md: the load-under-fault scenarios of
tests/hardening/test_faults_under_load.py with bigger counts, printed as one JSON object.

    flock /tmp/lepus-bench.lock python bench/faults.py --runs 3 --workers 20 --duration 60 \
        --down-from 15 --down-until 40 --json

Each scenario starts its own private PostgreSQL and Redis on loopback ports, migrates and seeds a
fresh database, runs gunicorn (`config.settings`, DEBUG off) and simulated crowd workers, applies
the fault, and counts requests, 5xx answers (500s and 503s apart) and submissions acknowledged
against rows stored. Nothing shared is stopped. See tests/support/faultload.py.

Each scenario runs `--runs` times (alternating: redis, postgres, redis, postgres, ...); the report
keeps every run and the median, min and max of each count, and is written as a raw file under
bench/results/ (bench/provenance.py) besides being printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from provenance import summarise_runs, write_raw  # noqa: E402

from tests.support.faultload import (  # noqa: E402
    postgres_restarted_scenario,
    redis_stopped_scenario,
)

SCENARIOS = {"redis": redis_stopped_scenario, "postgres": postgres_restarted_scenario}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="redis,postgres", help="comma-separated")
    parser.add_argument("--workers", type=int, default=20, help="simulated crowd workers")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--down-from", type=float, default=15.0, help="fault starts (s)")
    parser.add_argument("--down-until", type=float, default=40.0, help="fault ends (s)")
    parser.add_argument("--clips", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each scenario")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args()
    names = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in names}
    for run in range(1, args.runs + 1):
        for name in names:
            if not args.json:
                sys.stderr.write(f"[faults] {name}, run {run} of {args.runs} ...\n")
            runs[name].append(
                SCENARIOS[name](
                    clips=args.clips,
                    workers=args.workers,
                    duration=args.duration,
                    down_from=args.down_from,
                    down_until=args.down_until,
                )
            )
    report = {
        "settings": {
            "clips": args.clips,
            "workers": args.workers,
            "duration_s": args.duration,
            "down_from_s": args.down_from,
            "down_until_s": args.down_until,
            "runs": args.runs,
        },
        "scenarios": {
            name: {"summary": summarise_runs(scenario_runs), "runs": scenario_runs}
            for name, scenario_runs in runs.items()
        },
    }
    path = write_raw("faults", report)
    report["raw_file"] = (
        str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
    )
    sys.stdout.write(json.dumps(report, indent=None if args.json else 2) + "\n")


if __name__ == "__main__":
    main()
