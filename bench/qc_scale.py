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

Where a run's time goes (`--profile`): one `qc_campaign_full` of this campaign under cProfile,
with every SQL statement (execute and COPY) timed by wall clock, process CPU and the CPU of its
PostgreSQL backend.

    python bench/qc_scale.py --profile                 # reset, then one cold run, profiled
    python bench/qc_scale.py --profile --warm          # no reset: a warm run
    python bench/qc_scale.py --profile --top 40 --statements 25
    python bench/qc_scale.py --profile --pass-workers 200   # one after-submission pass instead

`--pass-workers N` profiles one after-submission pass (`workers_quality_update`, as
`quality_catch_up` calls it) of N active workers of that campaign instead of a full run: a full
run first if the campaign has none, then each of the N workers' three latest candidates gets its
stored judgment count set one lower, as after a submission the previous pass had not seen. The
phases are the pass's steps (slice read, statistics and rules, exclusions, statistics store,
aggregation), each timed by wrapping the function the pass calls. A profile, not a headline:
prints the slowest statements, the cProfile functions by cumulative time and the phases, writes
the profile to /tmp/qc_profile.pstats and the figures (with the slowest statements) as a
`qc_profile` raw file.

Same results (`--dump`, `--compare`): every output of a QC run over this campaign, as sorted text
files and one digest per table, so two code versions can be compared on the same world.

    python bench/qc_scale.py --dump /tmp/qc-before      # after a cold run of the old code
    python bench/qc_scale.py --dump /tmp/qc-after       # after a cold run of the new code
    python bench/qc_scale.py --compare /tmp/qc-before /tmp/qc-after

Per table, every column is dumped except surrogate ids of rows a run creates (exclusions, audit
entries, review items, snapshots: their ids depend on the sequence) and timestamps (a run's own
clock), which are replaced by whether they are set. Tables: campaign candidates (aggregates,
slots, review states), judgments (exclusion flags, reasons, details), review items, campaign
clips (open slots), participations, worker QC statistics, worker exclusions, audit entries and
agreement snapshots.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import resource
import sys
import time
from pathlib import Path
from typing import Any

import psycopg2

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
            key: {"before": _rounded(value["alpha_all"]), "after": _rounded(value["alpha_kept"])}
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


# --- --profile

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


def profile_run(options: argparse.Namespace) -> None:
    """One QC run under cProfile, every SQL statement timed (see the module's docstring)."""
    if options.pass_workers:
        profile_pass(options)
        return
    database_url = options.database_url or bench_database_url("qcbench", "qc_scale.py")
    if not options.warm:
        _child(database_url, "reset")
    setup_django(database_url)
    from django.db import connection

    from annotation.models import Campaign
    from annotation.quality.run import qc_campaign_full

    campaign = Campaign.objects.get(slug="qc-bench")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    _instrument(backend)
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
    "candidate_sums_load",
    "workers_evaluate",
    "workers_exclude",
    "worker_stats_store",
    "aggregation_apply",
    "aggregation_recompute",
)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _pass_workers(campaign: Any, count: int) -> list[int]:
    """`count` active workers spread over the campaign, each with their latest three candidates'
    stored judgment counts set one lower (a submission the previous pass had not seen) and, on a
    tree whose passes read stored candidate sums (migration 0018), those three judgments above
    what the worker's last pass saw (`WorkerQCStats.through_judgment_id` and the counts up to
    it). Such a tree's first call runs a full QC run if no candidate has stored sums yet (a
    tree before it aggregates without writing them)."""
    from django.db import connection

    from annotation.models import (
        CampaignCandidate,
        Judgment,
        Participation,
        ParticipationStatus,
        WorkerQCStats,
    )
    from annotation.quality.run import qc_campaign_full

    stores_sums = any(f.name == "kept_sums" for f in CampaignCandidate._meta.get_fields())
    if not CampaignCandidate.objects.filter(campaign=campaign, judgments_total__gt=0).exists() or (
        stores_sums
        and not CampaignCandidate.objects.filter(
            campaign=campaign, kept_sums__isnull=False
        ).exists()
    ):
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
        if stores_sums:
            cursor.execute(
                f"UPDATE {WorkerQCStats._meta.db_table} AS s SET through_judgment_id = x.through, "
                f"judgments_through = x.counted, kept_through = x.kept FROM ("
                f"SELECT participation_id, MAX(id) AS through, COUNT(*) AS counted, "
                f"COUNT(*) FILTER (WHERE NOT is_excluded) AS kept FROM (SELECT id, "
                f"participation_id, is_excluded, row_number() OVER (PARTITION BY participation_id "
                f"ORDER BY id DESC) AS n FROM {Judgment._meta.db_table} "
                f"WHERE participation_id = ANY(%s)) latest WHERE n > 3 GROUP BY participation_id"
                f") AS x WHERE s.participation_id = x.participation_id",
                [chosen],
            )
    return chosen


def profile_pass(options: argparse.Namespace) -> None:
    database_url = options.database_url or bench_database_url("qcbench", "qc_scale.py")
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


# --- --dump / --compare

TABLES: dict[str, tuple[str, ...]] = {
    "annotation_campaigncandidate": (),
    "annotation_judgment": (),
    "annotation_reviewitem": ("id",),
    "annotation_campaignclip": (),
    "annotation_participation": (),
    "annotation_workerqcstats": ("id",),
    "annotation_workerexclusion": ("id",),
    "annotation_auditentry": ("id", "review_item_id", "undoes_id"),
    "annotation_agreementsnapshot": ("id", "qc_run_id"),
}
# JSON columns that hold the id of the exclusion row under "exclusion" / "exclusion_id".
ID_BEARING_JSON = {
    ("annotation_judgment", "exclusion_detail"),
    ("annotation_auditentry", "before"),
    ("annotation_auditentry", "after"),
}


def _select(cursor: psycopg2.extensions.cursor, table: str) -> str:
    cursor.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        [table],
    )
    parts = []
    for name, kind in cursor.fetchall():
        if name in TABLES[table]:
            continue
        if "timestamp" in kind or kind == "date":
            parts.append(f'("{name}" IS NOT NULL) AS "{name}_set"')
        elif (table, name) in ID_BEARING_JSON:
            # The exclusion row's id is recorded in these JSON objects; keep the rest.
            parts.append(f"(\"{name}\" - 'exclusion' - 'exclusion_id')::text AS \"{name}\"")
        else:
            parts.append(f'"{name}"::text')
    columns = ", ".join(parts)
    return (
        f"SELECT {columns} FROM {table} ORDER BY {', '.join(str(i + 1) for i in range(len(parts)))}"
    )


def dump(database_url: str, folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    connection = psycopg2.connect(database_url)
    digests = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            path = folder / f"{table}.tsv"
            with path.open("w") as handle:
                cursor.copy_expert(f"COPY ({_select(cursor, table)}) TO STDOUT", handle)
            digests[table] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            lines = sum(1 for _ in path.open())
            print(f"{table}: {lines} rows, {digests[table]}")
    connection.close()
    return digests


def compare(first: Path, second: Path) -> bool:
    same = True
    for table in TABLES:
        a, b = (folder / f"{table}.tsv" for folder in (first, second))
        equal = a.read_bytes() == b.read_bytes()
        same &= equal
        print(f"{table}: {'identical' if equal else 'DIFFERENT'}")
    return same


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
    parser.add_argument("--profile", action="store_true", help="One profiled QC run instead.")
    parser.add_argument("--warm", action="store_true", help="--profile: no reset before the run.")
    parser.add_argument("--top", type=int, default=30, help="--profile: cProfile lines.")
    parser.add_argument("--statements", type=int, default=20, help="--profile: slowest SQL.")
    parser.add_argument(
        "--pass-workers",
        type=int,
        default=0,
        help="--profile: one after-submission pass of N workers instead of a full run.",
    )
    parser.add_argument("--dump", type=Path, metavar="DIR", help="Dump every QC output to DIR.")
    parser.add_argument(
        "--compare", type=Path, nargs=2, metavar="DIR", help="Compare two --dump folders."
    )
    options = parser.parse_args()
    if options.compare:
        raise SystemExit(0 if compare(*options.compare) else 1)
    if options.profile:
        if options.pass_workers:
            profile_pass(options)
        else:
            profile_run(options)
        return
    database_url = options.database_url or bench_database_url("qcbench", "qc_scale.py")
    if options.dump:
        dump(database_url, options.dump)
        return

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
