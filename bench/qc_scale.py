"""Quality control at scale: a full QC recompute (worker statistics, rules and exclusions,
agreement before/after, review detection, aggregation) over 1,000,000 judgments of about 333,000
candidates by 10,000 workers, on PostgreSQL.

    python bench/qc_scale.py                      # load (if needed) + cold run + warm run
    python bench/qc_scale.py --judgments 30000    # a small version while developing
    flock /tmp/lepus-bench.lock python bench/qc_scale.py --json
    flock /tmp/lepus-bench.lock python bench/qc_scale.py --runs 3   # reset + cold + warm, 3 times

Data is generated inside PostgreSQL (INSERT ... SELECT FROM generate_series, i.e. set-based, no
Python rows) into its own database `<your database>_qcbench`, which the script creates and
migrates. 2% of the workers are planted spammers (uniform 3s in under a second); honest workers
rate near the candidate's quality. Each measured run happens in a fresh child process so its
peak RSS (ru_maxrss) is the memory of the QC run alone plus Django and NumPy; beside its wall
time it reports the CPU time of that process and of its PostgreSQL backend (read from /proc: the
server runs on this machine) and the 1-minute load average before and after, since wall time on
a shared machine follows the other sessions' load. Between runs `reset` puts the campaign back to
its freshly loaded state (no QC results; the touched tables rewritten in primary-key order by
CLUSTER, so their rows sit where the load put them and their pages hold the fillfactor's free
room again as after an import), then takes a CHECKPOINT, so every cold run starts after one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from provenance import cpu_seconds_of, write_raw  # noqa: E402  (Django-free; records commit, machine, versions)

SLUG = "qc-bench"
QUESTIONS = ("descriptiveness", "relevance", "fluency")


from worlds import (  # noqa: E402
    bench_database_url,
    campaign_skeleton,
    insert_select,
    load_unless_loaded,
    run_child,
    setup_django,
)


def load(*, judgments: int, workers: int, spammer_every: int) -> dict[str, Any]:
    from django.db import connection

    from annotation.models import Judgment

    started = time.perf_counter()
    campaign, candidates = campaign_skeleton(
        campaign_fields={"slug": SLUG, "name": "QC benchmark", "judgments_per_candidate": 3},
        judgments=judgments,
        workers=workers,
        systems=6,
        prefix="bench",
        seed=0.42,
    )
    clips = candidates // 3
    judgments = candidates * 3
    # Three distinct workers per candidate; every `spammer_every`-th worker is a spammer.
    truth = "(1 + mod(c * 2654435761, 5))"
    noise = (
        "(CASE WHEN random() < 0.06 THEN 2 * sign(random() - 0.5) ELSE round(random() * 2 - 1) END)"
    )
    honest_value = f"GREATEST(1, LEAST(5, {truth} + {noise}))::int"
    spam = f"(mod(w, {spammer_every}) = 0)"
    insert_select(
        Judgment,
        {
            "campaign_id": str(campaign.pk),
            "campaign_candidate_id": "c",
            "participation_id": "w",
            "values": (
                f"CASE WHEN {spam} THEN jsonb_build_object('descriptiveness', 3, 'relevance', 3, "
                f"'fluency', 3) ELSE jsonb_build_object('descriptiveness', {honest_value}, "
                f"'relevance', {honest_value}, 'fluency', {honest_value}) END"
            ),
            "source": "'crowd'",
            "server_ms": f"CASE WHEN {spam} THEN 300 + (random() * 400)::int "
            f"ELSE 6000 + (random() * 20000)::int END",
            "created_at": "now() - (random() * interval '20 days')",
        },
        f"(SELECT c, 1 + mod(c::bigint * 7919 + s * 3331, {workers})::int AS w "
        f"FROM generate_series(1, %s) AS c, generate_series(0, 2) AS s) AS pairs",
        [candidates],
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {
        "clips": clips,
        "candidates": candidates,
        "judgments": judgments,
        "workers": workers,
        "spammers": workers // spammer_every,
        "load_seconds": round(time.perf_counter() - started, 1),
    }


def reset() -> None:
    """Back to the freshly loaded state: no exclusions, statistics, review items or aggregates."""
    from django.db import connection

    from annotation.models import (
        AgreementSnapshot,
        AuditEntry,
        CampaignCandidate,
        CampaignClip,
        Judgment,
        Participation,
        QCRun,
        ReviewItem,
        WorkerExclusion,
        WorkerQCStats,
    )

    with connection.cursor() as cursor:
        for model in (
            AuditEntry,
            ReviewItem,
            WorkerExclusion,
            WorkerQCStats,
            AgreementSnapshot,
            QCRun,
        ):
            cursor.execute(f"TRUNCATE {model._meta.db_table} CASCADE")
        cursor.execute(
            f"UPDATE {Judgment._meta.db_table} SET is_excluded = FALSE, excluded_by = '', "
            f"exclusion_reason = '', exclusion_detail = '{{}}', excluded_at = NULL "
            f"WHERE is_excluded"
        )
        cursor.execute(
            f"UPDATE {CampaignCandidate._meta.db_table} SET slots_taken = quota, "
            f"judgments_total = 0, kept_judgments = 0, means = '{{}}', overall = NULL, "
            f"normalized = NULL, training_class = NULL, rating_range = NULL, "
            f"is_finalised = FALSE, finalised_at = NULL, review_state = '', "
            f"resolution = '{{}}', dropped = FALSE"
        )
        cursor.execute(f"UPDATE {CampaignClip._meta.db_table} SET open_slots = 0")
        cursor.execute(
            f"UPDATE {Participation._meta.db_table} SET status = 'active' WHERE status <> 'active'"
        )
        # The UPDATEs above leave a dead version of every row they touched behind and move the
        # live one to the end of its table (the excluded judgments end up side by side). Rewrite
        # the tables in primary-key order, i.e. the order of the data load, so each run starts
        # from the pages a fresh import leaves: rows where they were loaded, the fillfactor's
        # free room on every page. (VACUUM FULL would keep the moved rows at the end.)
        for rewritten in (CampaignCandidate, CampaignClip, Judgment, Participation):
            table = rewritten._meta.db_table
            cursor.execute(f"CLUSTER {table} USING {table}_pkey")
        cursor.execute("ANALYZE")
        # A campaign's first QC pass comes long after its data was written, i.e. after a
        # checkpoint: the pass's first write to each page logs the whole page. Start every cold
        # run from there rather than from wherever the server's own checkpoints happen to be.
        cursor.execute("CHECKPOINT")


# ----------------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------------


def measured_run() -> dict[str, Any]:
    """One full QC run in this process; prints its figures as JSON."""
    from annotation.models import Campaign
    from annotation.quality.run import qc_campaign_full

    campaign = Campaign.objects.get(slug=SLUG)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    backend = _backend_pid()
    readers = _count_reader_backends()
    load_before = _load_average()
    backend_before = cpu_seconds_of(backend)
    cpu_before = time.process_time()
    started = time.perf_counter()
    summary = qc_campaign_full(campaign=campaign)
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    main_backend = cpu_seconds_of(backend) - backend_before
    return {
        "seconds": round(seconds, 2),
        # CPU is less sensitive than wall time to the other sessions sharing the two cores.
        "process_cpu_seconds": round(cpu, 2),
        # Every backend of the run: its own connection's and those of the parallel judgment
        # read (annotation.quality.loading), each of which is measured just before it closes.
        "postgres_backend_cpu_seconds": round(main_backend + sum(readers), 2),
        "postgres_reader_backends_cpu_seconds": [round(value, 2) for value in readers],
        "load_average_1min": {"start": load_before[0], "end": _load_average()[0]},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_before_run_mb": round(rss_before / 1024, 1),
        "workers": summary["workers"],
        "excluded_workers": len(summary["excluded"]),
        "judgments_excluded": summary["judgments_excluded"],
        "review_items": summary["review_items"],
        "candidates_updated": summary["candidates_updated"],
        "alpha": {
            key: {"before": round(value["alpha_all"], 4), "after": round(value["alpha_kept"], 4)}
            for key, value in summary["agreement"].items()
        },
        "phases": summary["timings"],
    }


def _count_reader_backends() -> list[float]:
    """Wrap the parallel judgment read's per-thread fetch so that the CPU of each of its
    PostgreSQL backends is appended to the returned list (read from /proc before the thread's
    connection closes, after which the backend is gone)."""
    from django.db import connection

    from annotation.quality import loading

    spent: list[float] = []

    def counted(sql: str, params: list[Any], columns: list[tuple[str, Any]]) -> Any:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid = int(cursor.fetchone()[0])
            before = cpu_seconds_of(pid)
            result = loading.fetch_columns(sql, params, columns)
            spent.append(cpu_seconds_of(pid) - before)
            return result
        finally:
            connection.close()

    loading._fetch_in_own_connection = counted  # type: ignore[assignment]
    return spent


def _load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def _backend_pid() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def _child(database_url: str, mode: str, *extra: str) -> dict[str, Any]:
    return run_child(__file__, database_url, mode, *extra)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of each headline figure over the runs."""
    import statistics

    result: dict[str, Any] = {"runs": len(runs)}
    for key in ("seconds", "process_cpu_seconds", "postgres_backend_cpu_seconds", "peak_rss_mb"):
        values = [run[key] for run in runs if key in run]
        if values:
            result[key] = {
                "median": round(statistics.median(values), 2),
                "min": min(values),
                "max": max(values),
            }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judgments", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--spammer-every", type=int, default=50, help="1 in N workers spams.")
    parser.add_argument("--reload", action="store_true", help="Regenerate the data first.")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    parser.add_argument("--runs", type=int, default=1, help="Repeat reset + cold + warm.")
    parser.add_argument("--note", default=None, help="Stored in the raw file.")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="The data was just loaded (--child load) and never QC'd: no reset before run 1.",
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--child", choices=["run", "load", "reset", "count"], default=None)
    options = parser.parse_args()
    database_url = options.database_url or bench_database_url("qcbench", "qc_scale.py")

    if options.child:
        setup_django(database_url)
        if options.child == "run":
            result = measured_run()
        elif options.child == "reset":
            reset()
            result = {"reset": True}
        elif options.child == "count":
            from annotation.models import Judgment

            result = {"judgments": Judgment.objects.count()}
        else:
            result = load(
                judgments=options.judgments,
                workers=options.workers,
                spammer_every=options.spammer_every,
            )
        print(json.dumps(result))
        return

    report: dict[str, Any] = {"database": database_url.rpartition("/")[2]}
    loaded = load_unless_loaded(
        __file__,
        database_url,
        judgments=options.judgments,
        reload=options.reload,
        load_arguments=[
            "--workers",
            str(options.workers),
            "--spammer-every",
            str(options.spammer_every),
        ],
    )
    if loaded is not None:
        report["load"] = loaded
    elif not options.fresh:
        _child(database_url, "reset")
    runs = []
    for index in range(options.runs):
        if index:
            _child(database_url, "reset")
        runs.append({"cold": _child(database_url, "run"), "warm": _child(database_url, "run")})
    report["runs"] = runs
    report["cold"], report["warm"] = runs[0]["cold"], runs[0]["warm"]
    report["summary"] = {name: summarise([run[name] for run in runs]) for name in ("cold", "warm")}
    write_raw("qc_scale", report, database=database_url, notes=options.note)
    if options.json:
        print(json.dumps(report, sort_keys=True))
        return
    for name in ("cold", "warm"):
        print(f"{name}, {options.runs} run(s): {report['summary'][name]}")
        run = report[name]
        print(
            f"{name}: {run['seconds']} s, peak RSS {run['peak_rss_mb']} MB; "
            f"{run['workers']} workers, {run['excluded_workers']} excluded, "
            f"{run['judgments_excluded']} judgments excluded, {run['review_items']} in review, "
            f"{run['candidates_updated']} candidates written; phases {run['phases']}"
        )


if __name__ == "__main__":
    main()
