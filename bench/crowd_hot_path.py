"""Where a crowd cycle's server CPU goes: `next` and `submit` through Django's WSGI handler,
in-process (no HTTP, no gunicorn), with the production settings.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/lepus_x REDIS_URL=redis://127.0.0.1:6379/5 \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/5 python bench/crowd_hot_path.py --cycles 600 \\
        --profile /tmp/hot.prof --json

It migrates the database, seeds the load benchmark's 1,000 clips x 3 candidates
(`bench/lepus_bench_setup.py`), creates a fresh campaign, joins `--workers` workers through the
join API and runs `--cycles` cycles (`next` + `submit`, workers in turn), reporting per cycle
(`--allocation adaptive` gives the campaign an adaptive judgment allocation; `--allocation
alternate` measures fixed and adaptive in turn, `--runs` times each, on fresh campaigns):

* the web process's CPU (`time.process_time`), split by view with `--profile` (cProfile);
* the database backend's CPU (utime+stime of this connection's PostgreSQL backend from /proc,
  so the database must run on this machine);
* the SQL statements the application sent (every `execute` on the psycopg2 connection, Django's
  health check included) and the transactions committed (`pg_stat_database.xact_commit`, which
  counts each COMMIT round trip and each autocommitted statement);
* the Redis commands (`INFO commandstats` delta) and the messages published to the broker.

The numbers are a lower bound of what a gunicorn worker spends (no HTTP parsing, no socket I/O)
and are meant to show *where* the time goes. Use a database of its own: the seed and campaigns
stay in it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))
# imported before anything runs: provenance takes the start load average and time at import
from provenance import write_raw  # noqa: E402

PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "DJANGO_DEBUG": "false",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
    "DJANGO_SECURE_SSL_REDIRECT": "false",
    "DJANGO_SECURE_COOKIES": "false",
    "LEPUS_LOG_LEVEL": "WARNING",
    "LEPUS_THROTTLE_JOIN": "100000/min",
    "LEPUS_THROTTLE_NEXT": "100000/min",
    "LEPUS_THROTTLE_SUBMIT": "100000/min",
    "LEPUS_THROTTLE_ME": "100000/min",
    "LEPUS_CHECK_WORKER_IDS": "false",
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# One statement of each kind as sent (parameters bound), for --explain.
SAMPLES: dict[str, str] = {}


def backend_cpu_ticks(pid: int) -> tuple[int, int]:
    """(user, system) CPU ticks of a process."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        raw = handle.read().decode()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]), int(fields[12])


class Wsgi:
    """Calls the WSGI application the way gunicorn does, minus the socket: `config.wsgi`'s, or
    with `full_stack` Django's plain handler (every middleware for every path)."""

    def __init__(self, *, full_stack: bool = False) -> None:
        if full_stack:
            from django.core.handlers.wsgi import WSGIHandler

            self.app: Any = WSGIHandler()
        else:
            from config.wsgi import application

            self.app = application

    def request(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_ACCEPT": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": io.BytesIO(data),
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
        }
        if data:
            environ["CONTENT_TYPE"] = "application/json"
        if token:
            environ["HTTP_AUTHORIZATION"] = f"Worker {token}"
        setup_testing_defaults(environ)  # the rest of a WSGI environ (host 127.0.0.1)
        status: list[str] = []

        def start_response(line: str, headers: list[Any], exc_info: Any = None) -> None:
            status.append(line)

        result = self.app(environ, start_response)
        try:
            payload = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        code = int(status[0].split()[0])
        return code, (json.loads(payload) if payload else None)


def install_statement_counter() -> Counter[str]:
    """Count every statement sent on Django's psycopg2 connections (health checks included)."""
    import psycopg2.extensions
    from django.db.backends.postgresql.base import DatabaseWrapper

    counts: Counter[str] = Counter()

    class CountingCursor(psycopg2.extensions.cursor):
        def execute(self, query: Any, vars: Any = None) -> Any:
            text = query.decode() if isinstance(query, bytes) else str(query)
            key = " ".join(text.split())[:90]
            counts[key] += 1
            if key not in SAMPLES:
                SAMPLES[key] = self.mogrify(query, vars).decode()
            return super().execute(query, vars)

    original = DatabaseWrapper.get_new_connection

    def get_new_connection(self: Any, conn_params: Any) -> Any:
        connection = original(self, conn_params)
        connection.cursor_factory = CountingCursor
        counts["<new connection>"] += 1
        return connection

    DatabaseWrapper.get_new_connection = get_new_connection  # type: ignore[method-assign]
    return counts


def profile_by_module(stats: pstats.Stats, cycles: int, top: int = 20) -> dict[str, float]:
    """Own CPU time (cProfile's tottime, so inflated by the profiler by 2-3x: read the shares)
    per cycle, grouped by installed package, Django sub-package, stdlib module or project file."""
    grouped: Counter[str] = Counter()
    for (filename, _line, function), entry in stats.stats.items():  # type: ignore[attr-defined]
        own_seconds = entry[2]
        if "site-packages/" in filename:
            parts = filename.split("site-packages/")[1].split("/")
            key = "/".join(parts[:3]) if parts[0] == "django" else parts[0]
        elif filename.startswith("~") or filename == "~":
            key = f"builtin {function}"[:60]
        elif str(REPO_ROOT) in filename:
            key = filename.replace(str(REPO_ROOT) + "/", "")
        else:
            key = "stdlib " + Path(filename).name
        grouped[key] += own_seconds
    return {key: round(value * 1000 / cycles, 3) for key, value in grouped.most_common(top)}


def explain_samples(connection: Any) -> dict[str, Any]:
    """Planning and execution time of one statement of each kind, each in a transaction that is
    rolled back (the INSERTs and UPDATEs change nothing). Timed over 20 runs, median."""
    from django.db import transaction

    explained: dict[str, Any] = {}
    for key, statement in sorted(SAMPLES.items()):
        if key.startswith(("SELECT 1", "ANALYZE", "SELECT pg_", "SELECT xact")):
            continue
        planning, execution = [], []
        plan_text = ""
        for _ in range(20):
            try:
                with transaction.atomic():
                    with connection.cursor() as cursor:
                        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement)
                        (plan,) = cursor.fetchone()
                        if isinstance(plan, str):
                            plan = json.loads(plan)
                    transaction.set_rollback(True)
            except Exception as error:  # e.g. a unique violation on a replayed INSERT
                explained[key] = {"error": str(error)[:200]}
                break
            planning.append(plan[0]["Planning Time"])
            execution.append(plan[0]["Execution Time"])
            plan_text = plan[0]["Plan"]["Node Type"]
        if planning:
            planning.sort()
            execution.sort()
            explained[key] = {
                "planning_ms": planning[len(planning) // 2],
                "execution_ms": execution[len(execution) // 2],
                "top_node": plan_text,
            }
    return explained


# The adaptive policy `--allocation adaptive` gives the campaign (docs/quality.md, "Judgment
# allocation"): the simulation's defaults.
ADAPTIVE_POLICY = {"kind": "adaptive", "minimum": 2, "maximum": 5, "disagreement_range": 2}


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=600)
    parser.add_argument("--warm-up", type=int, default=40)
    parser.add_argument("--profile", type=Path, help="write cProfile stats of the timed cycles")
    parser.add_argument("--top", type=int, default=45, help="cProfile lines to print")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="EXPLAIN ANALYZE one statement of each kind afterwards (rolled back): planning and "
        "execution time as PostgreSQL measures them",
    )
    parser.add_argument(
        "--full-stack",
        action="store_true",
        help="Django's plain WSGI handler instead of config.wsgi (the worker API's shorter "
        "middleware stack off)",
    )
    parser.add_argument(
        "--allocation",
        choices=("fixed", "adaptive", "alternate"),
        default="fixed",
        help="the campaign's judgment allocation: fixed (3 per candidate), adaptive "
        f"({ADAPTIVE_POLICY}), or alternate: fixed, adaptive, fixed, ... --runs times each on "
        "fresh campaigns, reporting the median (min-max) server CPU per cycle of each",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each policy (alternate)")
    parser.add_argument(
        "--raw", action="store_true", help="write the report as a raw file (bench/provenance.py)"
    )
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def main() -> None:
    args = parse_arguments()
    for key, value in PRODUCTION_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("DJANGO_SECRET_KEY", os.urandom(48).hex())
    if args.allocation == "alternate":
        # Six runs outlast the default 60 s connection age: a reconnect mid-run would move the
        # database backend whose CPU is measured.
        os.environ.setdefault("DATABASE_CONN_MAX_AGE", "3600")
    if not os.environ.get("REDIS_URL") or not os.environ.get("DATABASE_URL"):
        raise SystemExit("set DATABASE_URL (PostgreSQL on this machine) and REDIS_URL")

    import django

    django.setup()
    counts = install_statement_counter()
    from django.core.management import call_command

    call_command("migrate", "--noinput", "-v", "0")
    import lepus_bench_setup as setup

    setup.seed(clips=1000, candidates_per_clip=3, references_per_clip=10)
    wsgi = Wsgi(full_stack=args.full_stack)
    if args.allocation != "alternate":
        report = measured_run(wsgi, args, counts, allocation=args.allocation, profile=True)
    else:
        report = alternated_runs(wsgi, args, counts)
    if args.raw:
        write_raw(
            "crowd_hot_path",
            {key: value for key, value in report.items() if key != "profile_top_cumulative"},
            database=os.environ["DATABASE_URL"],
        )
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        for key, value in report.items():
            if key != "profile_top_cumulative":
                sys.stdout.write(f"{key}: {value}\n")
        sys.stdout.write(report.get("profile_top_cumulative", ""))


def server_cpu(report: dict[str, Any]) -> float:
    """The server's CPU of a cycle: the web process's plus its database backend's."""
    return round(report["web_cpu_ms_per_cycle"] + report["database_backend_cpu_ms_per_cycle"], 3)


def alternated_runs(wsgi: Wsgi, args: argparse.Namespace, counts: Counter[str]) -> dict[str, Any]:
    """Fixed, adaptive, fixed, ... `--runs` times each (so a drift of the machine's load falls on
    both), each on a fresh campaign, without the profiler; the median (min-max) of each."""
    import statistics

    runs: list[dict[str, Any]] = []
    for _round in range(args.runs):
        for allocation in ("fixed", "adaptive"):
            run = measured_run(wsgi, args, counts, allocation=allocation, profile=False)
            run["server_cpu_ms_per_cycle"] = server_cpu(run)
            runs.append(run)
    summary: dict[str, Any] = {}
    for allocation in ("fixed", "adaptive"):
        values = [run["server_cpu_ms_per_cycle"] for run in runs if run["allocation"] == allocation]
        web = [run["web_cpu_ms_per_cycle"] for run in runs if run["allocation"] == allocation]
        summary[allocation] = {
            "server_cpu_ms_per_cycle_median": round(statistics.median(values), 3),
            "server_cpu_ms_per_cycle_min_max": [min(values), max(values)],
            "web_cpu_ms_per_cycle_median": round(statistics.median(web), 3),
            "runs": values,
        }
    ratio = (
        summary["adaptive"]["server_cpu_ms_per_cycle_median"]
        / summary["fixed"]["server_cpu_ms_per_cycle_median"]
    )
    return {
        "allocation": "alternate",
        "adaptive_policy": ADAPTIVE_POLICY,
        "runs_each": args.runs,
        "server_cpu": "web process CPU + its PostgreSQL backend's CPU, per cycle (ms)",
        "summary": summary,
        "adaptive_over_fixed": round(ratio, 4),
        "adaptive_within_10_percent": ratio <= 1.10,
        "order": [run["allocation"] for run in runs],
        "each_run": runs,
    }


def run_campaign(wsgi: Wsgi, *, allocation: str, workers: int) -> list[str]:
    """A fresh campaign over the seeded clips, with this allocation; the joined workers' tokens."""
    import lepus_bench_setup as setup
    from django.db import connection

    from annotation.crowd.services.campaigns import campaign_update
    from annotation.models import Campaign

    slug = f"hotpath-{allocation}-{time.time_ns()}"
    setup.campaign(slug=slug, judgments_per_candidate=3)
    if allocation == "adaptive":
        campaign_update(campaign=Campaign.objects.get(slug=slug), allocation=ADAPTIVE_POLICY)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    tokens = []
    for index in range(workers):
        code, body = wsgi.request(
            "POST",
            f"/api/v1/campaigns/{slug}/join",
            {"platform": "prolific", "external_id": f"hot{index:04d}-{slug}"},
        )
        assert code == 200, (code, body)
        tokens.append(body["worker_token"])
    return tokens


def measured_run(
    wsgi: Wsgi,
    args: argparse.Namespace,
    counts: Counter[str],
    *,
    allocation: str,
    profile: bool,
) -> dict[str, Any]:
    """One campaign's warm-up and timed cycles, and what they cost (module docstring)."""
    import redis
    from django.conf import settings
    from django.db import connection

    tokens = run_campaign(wsgi, allocation=allocation, workers=args.workers)
    redis_client = redis.Redis.from_url(settings.REDIS_URL)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL.replace("redis+socket", "unix"))
    rng = random.Random(7)

    def cycle(token: str) -> bool:
        code, offer = wsgi.request("POST", "/api/v1/worker/assignments/next", None, token)
        if code == 204:
            return False
        assert code == 200, (code, offer)
        ratings = [
            {"candidate_id": c["id"], **{q["key"]: rng.randint(1, 5) for q in offer["questions"]}}
            for c in offer["candidates"]
        ]
        code, result = wsgi.request(
            "POST",
            f"/api/v1/worker/assignments/{offer['assignment_id']}/submit",
            {"ratings": ratings},
            token,
        )
        assert code == 201, (code, result)
        return True

    for index in range(args.warm_up):
        cycle(tokens[index % len(tokens)])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend_pid = cursor.fetchone()[0]
    probes = _Probes(connection, redis_client, broker, settings.DATABASES["default"]["NAME"])
    before = probes.read()
    counts.clear()
    SAMPLES.clear()
    db_before = backend_cpu_ticks(backend_pid)
    # CPU time, not wall time: waiting for PostgreSQL or Redis is not the web process's CPU.
    profiler = (
        cProfile.Profile(time.process_time) if profile and (args.profile or not args.json) else None
    )
    cpu_before = time.process_time()
    wall_before = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    done = sum(1 for index in range(args.cycles) if cycle(tokens[index % len(tokens)]))
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - wall_before
    cpu = time.process_time() - cpu_before
    db_after = backend_cpu_ticks(backend_pid)
    statements = dict(counts)
    after = probes.read()
    report = _report(
        args,
        done=done,
        cpu=cpu,
        wall=wall,
        db=(db_after[0] - db_before[0], db_after[1] - db_before[1]),
        statements=statements,
        probes=probes.delta(before, after),
    )
    report = {"allocation": allocation, **report}
    if profiler is not None:
        _profile_into(report, profiler, args, done)
    if args.explain:
        report["explain"] = explain_samples(connection)
    broker.delete("default")  # nobody consumes this database's queue
    return report


class _Probes:
    """Commits (pg_stat_database), Redis commands and broker messages, read before and after."""

    def __init__(self, connection: Any, redis_client: Any, broker: Any, dbname: str) -> None:
        self.connection, self.redis, self.broker, self.dbname = (
            connection,
            redis_client,
            broker,
            dbname,
        )

    def xact_commit(self) -> int:
        time.sleep(1.2)  # statistics are flushed at most once a second
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [self.dbname]
            )
            return int(cursor.fetchone()[0])

    def read(self) -> tuple[int, dict[str, int], int]:
        stats = self.redis.info("commandstats")
        redis_calls = {key: int(value["calls"]) for key, value in stats.items()}
        return self.xact_commit(), redis_calls, int(self.broker.llen("default"))

    @staticmethod
    def delta(
        before: tuple[int, dict[str, int], int], after: tuple[int, dict[str, int], int]
    ) -> dict[str, Any]:
        commits = after[0] - before[0] - 2  # the two reads of xact_commit's own snapshot
        redis_delta = {
            key: after[1][key] - before[1].get(key, 0)
            for key in after[1]
            if after[1][key] - before[1].get(key, 0)
        }
        # The INFO of the 'after' read is not part of the cycles.
        redis_delta["cmdstat_info"] = redis_delta.get("cmdstat_info", 1) - 1
        return {"commits": commits, "redis": redis_delta, "published": after[2] - before[2]}


def _report(
    args: argparse.Namespace,
    *,
    done: int,
    cpu: float,
    wall: float,
    db: tuple[int, int],
    statements: dict[str, int],
    probes: dict[str, Any],
) -> dict[str, Any]:
    db_user, db_system = db
    return {
        "cycles": done,
        "workers": args.workers,
        "wsgi": "django WSGIHandler (full stack)" if args.full_stack else "config.wsgi.application",
        "web_cpu_ms_per_cycle": round(cpu * 1000 / done, 3),
        "database_backend_cpu_ms_per_cycle": round(
            (db_user + db_system) * 1000 / CLOCK_TICKS / done, 3
        ),
        "database_backend_user_system_ms_per_cycle": [
            round(db_user * 1000 / CLOCK_TICKS / done, 3),
            round(db_system * 1000 / CLOCK_TICKS / done, 3),
        ],
        "wall_ms_per_cycle": round(wall * 1000 / done, 3),
        "profiled": False,
        "sql_statements_per_cycle": round(sum(statements.values()) / done, 2),
        "sql_statements": {k: round(v / done, 2) for k, v in sorted(statements.items())},
        "commits_per_cycle": round(probes["commits"] / done, 2),
        "redis_commands_per_cycle": {
            k.removeprefix("cmdstat_"): round(v / done, 2) for k, v in probes["redis"].items() if v
        },
        "broker_messages_published": probes["published"],
    }


def _profile_into(
    report: dict[str, Any], profiler: cProfile.Profile, args: argparse.Namespace, done: int
) -> None:
    report["profiled"] = True
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    stats.sort_stats("cumulative").print_stats(args.top)
    report["profile_top_cumulative"] = stream.getvalue()
    report["profile_cpu_ms_per_cycle_by_module"] = profile_by_module(stats, done)
    if args.profile:
        stats.dump_stats(str(args.profile))


if __name__ == "__main__":
    main()
