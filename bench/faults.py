"""Fault figures for docs/benchmarks.md: the load-under-fault scenarios of
tests/hardening/test_faults_under_load.py with bigger counts, printed as one JSON object.

    python bench/faults.py --workers 20 --duration 60 --down-from 15 --down-until 40 --json

Each scenario starts its own private PostgreSQL and Redis on loopback ports, migrates and seeds a
fresh database, runs gunicorn (`config.settings`, DEBUG off) and simulated crowd workers, applies
the fault, and counts requests, 5xx answers (500s and 503s apart) and submissions acknowledged
against rows stored. Nothing shared is stopped. See tests/support/faultload.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

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
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args()
    names = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")
    report: dict[str, object] = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "scenarios": {},
    }
    for name in names:
        if not args.json:
            sys.stderr.write(f"[faults] {name} ...\n")
        report["scenarios"][name] = SCENARIOS[name](  # type: ignore[index]
            clips=args.clips,
            workers=args.workers,
            duration=args.duration,
            down_from=args.down_from,
            down_until=args.down_until,
        )
    sys.stdout.write(json.dumps(report, indent=None if args.json else 2) + "\n")


if __name__ == "__main__":
    main()
