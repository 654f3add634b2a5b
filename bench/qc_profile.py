"""Where a QC run's time goes: one `qc_campaign_full` of `bench/qc_scale.py`'s campaign under
cProfile, with every SQL statement (execute and COPY) timed by wall clock, process CPU and the
CPU of its PostgreSQL backend (read from /proc: the server runs on this machine).

    python bench/qc_profile.py                 # reset, then one cold run, profiled
    python bench/qc_profile.py --warm          # no reset: a warm run
    python bench/qc_profile.py --top 40 --statements 25
    python bench/qc_profile.py --pass-workers 200   # one after-submission pass instead

`--pass-workers N` profiles one after-submission pass (`workers_quality_update`, as
`quality_catch_up` calls it) of N active workers of that campaign instead of a full run: a full
run first if the campaign has none, then each of the N workers' three latest candidates gets its
stored judgment count set one lower, as after a submission the previous pass had not seen. The
phases are the pass's steps (slice read, statistics and rules, exclusions, statistics store,
aggregation), each timed by wrapping the function the pass calls.

A profile, not a headline: prints the slowest statements, the cProfile functions by cumulative
time and the phases, writes the profile to /tmp/qc_profile.pstats and the figures (with the
slowest statements) as a raw file under bench/results/ (bench/provenance.py).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from provenance import cpu_seconds_of, write_raw  # noqa: E402
from worlds import bench_database_url, run_child, setup_django  # noqa: E402

STATEMENTS: list[dict[str, Any]] = []


def _instrument(backend: int) -> None:
    from django.db.backends import utils

    def timed(method: Any) -> Any:
        def wrapper(self: Any, sql: Any, *args: Any, **kwargs: Any) -> Any:
            wall, cpu, server = time.perf_counter(), time.process_time(), cpu_seconds_of(backend)
            try:
                return method(self, sql, *args, **kwargs)
            finally:
                STATEMENTS.append(
                    {
                        "sql": " ".join(str(sql).split())[:160],
                        "wall": time.perf_counter() - wall,
                        "process": time.process_time() - cpu,
                        "backend": cpu_seconds_of(backend) - server,
                    }
                )

        return wrapper

    utils.CursorWrapper.execute = timed(utils.CursorWrapper.execute)  # type: ignore[method-assign]

    def copy_expert(self: Any, sql: str, file: Any, *args: Any) -> Any:
        return self.cursor.copy_expert(sql, file, *args)

    utils.CursorWrapper.copy_expert = timed(copy_expert)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", action="store_true", help="No reset before the run.")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--statements", type=int, default=20)
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--pass-workers", type=int, default=0, help="Profile one after-submission pass instead."
    )
    options = parser.parse_args()
    if options.pass_workers:
        profile_pass(options)
        return
    database_url = options.database_url or bench_database_url("qcbench", "qc_profile.py")
    if not options.warm:
        run_child(str(ROOT / "bench" / "qc_scale.py"), database_url, "reset")
    setup_django(database_url)
    from django.db import connection

    from annotation.models import Campaign
    from annotation.quality.run import qc_campaign_full

    campaign = Campaign.objects.get(slug="qc-bench")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    _instrument(backend)
    from qc_scale import _count_reader_backends

    readers = _count_reader_backends()
    profile = cProfile.Profile()
    wall, cpu, server = time.perf_counter(), time.process_time(), cpu_seconds_of(backend)
    load = os.getloadavg()[0]
    profile.enable()
    summary = qc_campaign_full(campaign=campaign)
    profile.disable()
    wall, cpu, server = (
        time.perf_counter() - wall,
        time.process_time() - cpu,
        cpu_seconds_of(backend) - server,
    )
    print(
        f"wall {wall:.2f} s, process CPU {cpu:.2f} s, "
        f"backend CPU {server:.2f} s (+ {sum(readers):.2f} s in "
        f"{len(readers)} parallel reader(s)); load {load:.2f} -> "
        f"{os.getloadavg()[0]:.2f}; {summary['candidates_updated']} candidates written, "
        f"{summary['judgments_newly_excluded']} judgments excluded"
    )
    print("phases:", summary["timings"])
    total = {key: sum(row[key] for row in STATEMENTS) for key in ("wall", "process", "backend")}
    print(f"{len(STATEMENTS)} statements: " + ", ".join(f"{k} {v:.2f} s" for k, v in total.items()))
    for row in sorted(STATEMENTS, key=lambda row: -row["wall"])[: options.statements]:
        print(
            f"  {row['wall']:6.3f} wall {row['process']:6.3f} proc {row['backend']:6.3f} pg  "
            f"{row['sql']}"
        )
    slowest = sorted(STATEMENTS, key=lambda row: -row["wall"])[: options.statements]
    write_raw(
        "qc_profile",
        {
            "run": "warm" if options.warm else "cold",
            "wall_seconds": round(wall, 3),
            "process_cpu_seconds": round(cpu, 3),
            "backend_cpu_seconds": round(server, 3),
            "reader_backends_cpu_seconds": [round(value, 3) for value in readers],
            "phases": summary["timings"],
            "candidates_updated": summary["candidates_updated"],
            "judgments_newly_excluded": summary["judgments_newly_excluded"],
            "statements": {"count": len(STATEMENTS), **total},
            "slowest_statements": slowest,
        },
        database=database_url,
        notes="one profiled run (cProfile inflates the process CPU); a profile, not a headline",
    )
    profile.dump_stats("/tmp/qc_profile.pstats")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(options.top)
    pstats.Stats(profile).sort_stats("tottime").print_stats(options.top)


PASS_STEPS = (
    "campaign_slice_load",
    "campaign_median_seconds",
    "workers_evaluate",
    "workers_exclude",
    "worker_stats_store",
    "aggregation_apply",
    "aggregation_recompute",
)


def _pass_workers(campaign: Any, count: int) -> list[int]:
    """`count` active workers spread over the campaign, each with their latest three candidates'
    stored judgment counts set one lower (a submission the previous pass had not seen)."""
    from django.db import connection

    from annotation.models import CampaignCandidate, Judgment, Participation, ParticipationStatus
    from annotation.quality.run import qc_campaign_full

    if not CampaignCandidate.objects.filter(campaign=campaign, judgments_total__gt=0).exists():
        qc_campaign_full(campaign=campaign)
    active = list(
        Participation.objects.filter(campaign=campaign, status=ParticipationStatus.ACTIVE)
        .order_by("id")
        .values_list("id", flat=True)
    )
    chosen = active[:: max(1, len(active) // count)][:count]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {CampaignCandidate._meta.db_table} SET judgments_total = judgments_total - 1 "
            f"WHERE id IN (SELECT campaign_candidate_id FROM (SELECT campaign_candidate_id, "
            f"row_number() OVER (PARTITION BY participation_id ORDER BY id DESC) AS n "
            f"FROM {Judgment._meta.db_table} WHERE participation_id = ANY(%s)) latest "
            f"WHERE n <= 3) AND judgments_total > 0",
            [chosen],
        )
    return chosen


def profile_pass(options: argparse.Namespace) -> None:
    database_url = options.database_url or bench_database_url("qcbench", "qc_profile.py")
    setup_django(database_url)
    from django.db import connection

    from annotation.models import Campaign, Judgment
    from annotation.quality import incremental

    campaign = Campaign.objects.get(slug="qc-bench")
    participation_ids = _pass_workers(campaign, options.pass_workers)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    phases: dict[str, dict[str, float]] = {}

    def phased(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            server = cpu_seconds_of(backend)
            try:
                return function(*args, **kwargs)
            finally:
                phase = phases.setdefault(name, {"wall": 0.0, "process": 0.0, "backend": 0.0})
                phase["wall"] += time.perf_counter() - wall
                phase["process"] += time.process_time() - cpu
                phase["backend"] += cpu_seconds_of(backend) - server

        return wrapper

    for name in PASS_STEPS:
        if hasattr(incremental, name):
            setattr(incremental, name, phased(name, getattr(incremental, name)))
    _instrument(backend)
    judgments = Judgment.objects.filter(campaign=campaign).count()
    profile = cProfile.Profile()
    wall, cpu, server = time.perf_counter(), time.process_time(), cpu_seconds_of(backend)
    load = os.getloadavg()[0]
    profile.enable()
    incremental.workers_quality_update(campaign=campaign, participation_ids=participation_ids)
    profile.disable()
    wall, cpu, server = (
        time.perf_counter() - wall,
        time.process_time() - cpu,
        cpu_seconds_of(backend) - server,
    )
    rounded = {
        name: {key: round(value, 3) for key, value in figures.items()}
        for name, figures in phases.items()
    }
    print(
        f"one pass of {len(participation_ids)} workers ({judgments} judgments in the campaign): "
        f"wall {wall:.3f} s, process CPU {cpu:.3f} s, backend CPU {server:.3f} s; "
        f"load {load:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    for name, figures in rounded.items():
        print(f"  {name:24s} {figures}")
    total = {key: sum(row[key] for row in STATEMENTS) for key in ("wall", "process", "backend")}
    print(f"{len(STATEMENTS)} statements: " + ", ".join(f"{k} {v:.3f} s" for k, v in total.items()))
    slowest = sorted(STATEMENTS, key=lambda row: -row["wall"])[: options.statements]
    for row in slowest:
        print(
            f"  {row['wall']:6.3f} wall {row['process']:6.3f} proc {row['backend']:6.3f} pg  "
            f"{row['sql']}"
        )
    write_raw(
        "qc_profile",
        {
            "run": "after-submission pass",
            "pass_workers": len(participation_ids),
            "campaign_judgments": judgments,
            "wall_seconds": round(wall, 3),
            "process_cpu_seconds": round(cpu, 3),
            "backend_cpu_seconds": round(server, 3),
            "phases": rounded,
            "statements": {"count": len(STATEMENTS), **total},
            "slowest_statements": slowest,
        },
        database=database_url,
        notes="one profiled pass (cProfile inflates the process CPU); a profile, not a headline",
    )
    pstats.Stats(profile).sort_stats("cumulative").print_stats(options.top)


if __name__ == "__main__":
    main()
