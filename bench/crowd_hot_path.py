"""Where a crowd cycle's server CPU goes: `next` and `submit` through Django's WSGI handler,
in-process (no HTTP, no gunicorn), with the production settings.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/lepus_x REDIS_URL=redis://127.0.0.1:6379/5 \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/5 python bench/crowd_hot_path.py --cycles 600 \\
        --profile /tmp/hot.prof --json

It migrates the database, seeds the load benchmark's 1,000 clips x 3 candidates
(`bench/lepus_bench_setup.py`), creates a fresh campaign, joins `--workers` workers through the
join API and runs `--cycles` cycles (`next` + `submit`, workers in turn), reporting per cycle:

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


def main() -> None:
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
        "--raw", action="store_true", help="write the report as a raw file (bench/provenance.py)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    for key, value in PRODUCTION_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("DJANGO_SECRET_KEY", os.urandom(48).hex())
    if not os.environ.get("REDIS_URL") or not os.environ.get("DATABASE_URL"):
        raise SystemExit("set DATABASE_URL (PostgreSQL on this machine) and REDIS_URL")

    import django

    django.setup()
    counts = install_statement_counter()
    import redis
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", "--noinput", "-v", "0")
    import lepus_bench_setup as setup

    setup.seed(clips=1000, candidates_per_clip=3, references_per_clip=10)
    slug = f"hotpath-{int(time.time())}"
    setup.campaign(slug=slug, judgments_per_candidate=3)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    wsgi = Wsgi(full_stack=args.full_stack)
    tokens = []
    for index in range(args.workers):
        code, body = wsgi.request(
            "POST",
            f"/api/v1/campaigns/{slug}/join",
            {"platform": "prolific", "external_id": f"hot{index:04d}-{slug}"},
        )
        assert code == 200, (code, body)
        tokens.append(body["worker_token"])
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
    backend_pid = None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend_pid = cursor.fetchone()[0]
    dbname = settings.DATABASES["default"]["NAME"]

    def xact_commit() -> int:
        time.sleep(1.2)  # statistics are flushed at most once a second
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [dbname])
            return int(cursor.fetchone()[0])

    def redis_calls() -> dict[str, int]:
        stats = redis_client.info("commandstats")
        return {key: int(value["calls"]) for key, value in stats.items()}

    def broker_messages() -> int:
        return int(broker.llen("default"))

    commits_before = xact_commit()
    redis_before = redis_calls()
    broker_before = broker_messages()
    counts.clear()
    SAMPLES.clear()
    db_before = backend_cpu_ticks(backend_pid)
    # CPU time, not wall time: waiting for PostgreSQL or Redis is not the web process's CPU.
    profiler = cProfile.Profile(time.process_time) if args.profile or not args.json else None
    cpu_before = time.process_time()
    wall_before = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    done = 0
    for index in range(args.cycles):
        if cycle(tokens[index % len(tokens)]):
            done += 1
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - wall_before
    cpu = time.process_time() - cpu_before
    db_after = backend_cpu_ticks(backend_pid)
    db_user, db_system = db_after[0] - db_before[0], db_after[1] - db_before[1]
    statements = dict(counts)
    commits = xact_commit() - commits_before - 2  # the two reads of xact_commit's own snapshot
    redis_after = redis_calls()
    # The INFO of the 'after' read is not part of the cycles.
    redis_delta = {
        key: redis_after[key] - redis_before.get(key, 0)
        for key in redis_after
        if redis_after[key] - redis_before.get(key, 0)
    }
    redis_delta["cmdstat_info"] = redis_delta.get("cmdstat_info", 1) - 1
    published = broker_messages() - broker_before
    report: dict[str, Any] = {
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
        "profiled": profiler is not None,
        "sql_statements_per_cycle": round(sum(statements.values()) / done, 2),
        "sql_statements": {k: round(v / done, 2) for k, v in sorted(statements.items())},
        "commits_per_cycle": round(commits / done, 2),
        "redis_commands_per_cycle": {
            k.removeprefix("cmdstat_"): round(v / done, 2) for k, v in redis_delta.items() if v
        },
        "broker_messages_published": published,
    }
    if profiler is not None:
        stream = io.StringIO()
        stats = pstats.Stats(profiler, stream=stream)
        stats.sort_stats("cumulative").print_stats(args.top)
        report["profile_top_cumulative"] = stream.getvalue()
        report["profile_cpu_ms_per_cycle_by_module"] = profile_by_module(stats, done)
        if args.profile:
            stats.dump_stats(str(args.profile))
    if args.explain:
        report["explain"] = explain_samples(connection)
    broker.delete("default")  # nobody consumes this database's queue
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


if __name__ == "__main__":
    main()
