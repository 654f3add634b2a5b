"""Load under faults: a production-like stack on private servers, simulated crowd workers, a fault
in the middle of the load, and the counts that say whether any acknowledged submission was lost.

The stack: a private PostgreSQL cluster (a fresh database, migrated by `manage.py migrate` and
seeded by `bench/lepus_bench_setup.py`), a private Redis (broker and cache, as in production) and
gunicorn (gthread) with `config.settings`, DEBUG off. Everything listens on loopback ports of its
own: the shared services of the machine are never stopped.

A simulated worker joins, then loops `next` -> `submit` like the worker page does: a submit whose
answer was lost (transport error or 5xx) is sent again with the same body until it is acknowledged
(201 stored, or 200 an identical repeat of one stored earlier). After the load, each acknowledged
assignment must be stored, and nothing is stored that was not acknowledged.

Used by tests/hardening/test_faults_*.py (small counts) and bench/faults.py (bigger counts, one JSON
object for docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.processes import REPO_ROOT, free_port, wait_until
from tests.support.services import PrivatePostgres, PrivateRedis

CAMPAIGN = "faults"
QUESTION_KEYS = ("descriptiveness", "relevance", "fluency")


# --- The stack -------------------------------------------------------------------------------------


@dataclass
class Stack:
    root: Path
    postgres: PrivatePostgres
    redis: PrivateRedis
    env: dict[str, str]
    database: str = "lepus"
    port: int = 0
    server: subprocess.Popen[bytes] | None = None
    celery: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def manage(self, *args: str, timeout: float = 300) -> str:
        result = subprocess.run(
            [sys.executable, *args],
            cwd=REPO_ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return result.stdout

    def sql(
        self, query: str, params: tuple[Any, ...] = (), *, autocommit: bool = False
    ) -> list[tuple[Any, ...]]:
        import psycopg2

        connection = psycopg2.connect(
            host="127.0.0.1", port=self.postgres.port, user="postgres", dbname=self.database
        )
        connection.autocommit = autocommit
        try:
            with connection.cursor() as cursor:
                cursor.execute(query, params)
                return list(cursor.fetchall()) if cursor.description else []
        finally:
            connection.close()

    def start_server(self, *, workers: int = 2, threads: int = 4) -> None:
        self.port = free_port()
        log = open(self.root / "gunicorn.log", "ab")  # noqa: SIM115 - owned by the child
        self.server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "config.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(workers),
                "--worker-class",
                "gthread",
                "--threads",
                str(threads),
                "--timeout",
                "60",
            ],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self._server_answers, timeout=60, message="gunicorn to answer")

    def _server_answers(self) -> bool:
        if self.server is not None and self.server.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{self.log('gunicorn.log')}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            connection.request("GET", "/api/v1/worker/me")
            status = connection.getresponse().status
            connection.close()
        except OSError:
            return False
        return status == 401

    def start_celery(self) -> None:
        log = open(self.root / "celery.log", "ab")  # noqa: SIM115 - owned by the child
        self.celery = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                "default",
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=INFO",
                "-n",
                f"faults-{os.getpid()}-{time.time_ns()}@%h",
            ],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(
            lambda: "ready." in self.log("celery.log") or self.celery.poll() is not None,
            timeout=60,
            message="celery worker ready",
        )
        if self.celery.poll() is not None:
            raise RuntimeError(f"celery worker exited:\n{self.log('celery.log')}")

    def send_task(self, name: str) -> None:
        """Publish a task by name, as celery beat does."""
        self.manage(
            "-c",
            "import django; django.setup(); from config.celery import app; "
            f"app.send_task({name!r}, retry=False)",
        )

    def log(self, name: str) -> str:
        path = self.root / name
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for process in (self.server, self.celery):
            if process is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)
        self.redis.stop()
        self.postgres.destroy()
        shutil.rmtree(self.root, ignore_errors=True)


def stack_environment(root: Path, postgres: PrivatePostgres, redis: PrivateRedis) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    for key in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "LEPUS_S3_BUCKET"):
        env.pop(key, None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": os.urandom(48).hex(),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DJANGO_SECURE_COOKIES": "false",
            "DATABASE_URL": postgres.database_url("lepus"),
            # Persistent connections with health checks, as in production.
            "DATABASE_CONN_MAX_AGE": "60",
            "DATABASE_CONNECT_TIMEOUT": "2",
            "REDIS_URL": redis.url,
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{redis.port}/1",
            "CELERY_BROKER_CONNECTION_TIMEOUT": "1",
            "LEPUS_VAR_DIR": str(root / "var"),
            "LEPUS_LOG_LEVEL": "WARNING",
            # Every simulated worker joins from 127.0.0.1; next and submit keep the production
            # per-worker rates (600/min), so the throttle (on the Redis cache) really runs.
            "LEPUS_THROTTLE_JOIN": "100000/min",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@contextlib.contextmanager
def running_stack(*, clips: int = 200, judgments_per_candidate: int = 3) -> Iterator[Stack]:
    """Private PostgreSQL and Redis, a migrated and seeded database with campaign `faults`, and
    gunicorn on a free port."""
    root = Path(tempfile.mkdtemp(prefix="lepus-faults-"))
    postgres = PrivatePostgres().init().start()
    redis = PrivateRedis().start()
    stack = Stack(root=root, postgres=postgres, redis=redis, env={})
    try:
        postgres.createdb("lepus")
        # PrivatePostgres turns synchronous_commit off for speed, so a crash (immediate stop)
        # would lose the last commits even though they were acknowledged; production keeps it on.
        stack.sql("ALTER DATABASE lepus SET synchronous_commit = on", autocommit=True)
        stack.env = stack_environment(root, postgres, redis)
        stack.manage("manage.py", "migrate", "--noinput", "-v", "0")
        stack.manage(
            "bench/lepus_bench_setup.py",
            "seed",
            "--clips",
            str(clips),
            "--candidates-per-clip",
            "3",
            "--references-per-clip",
            "2",
        )
        stack.manage(
            "bench/lepus_bench_setup.py",
            "campaign",
            "--slug",
            CAMPAIGN,
            "--judgments-per-candidate",
            str(judgments_per_candidate),
        )
        stack.start_server()
        yield stack
    finally:
        stack.stop()


# --- The load --------------------------------------------------------------------------------------


class TransportError(Exception):
    pass


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str


class Client:
    """One persistent HTTP connection to the loopback server."""

    def __init__(self, port: int, token: str = "") -> None:
        self.port = port
        self.token = token
        self.connection: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, payload: Any = None) -> Answer:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Worker {self.token}"
        body = None if payload is None else json.dumps(payload).encode()
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
            data = response.read()
            if response.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as error:
            self.close()
            raise TransportError(f"{type(error).__name__}: {error}") from error
        return Answer(response.status, data, response.getheader("Content-Type") or "")

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


@dataclass
class LoadCounts:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    transport_errors: int = 0
    # 5xx answers other than a clean 503 (a JSON or plain message, no traceback, no HTML page).
    unclean_errors: list[str] = field(default_factory=list)
    created: set[int] = field(default_factory=set)  # 201
    repeated: set[int] = field(default_factory=set)  # 200: identical repeat of a stored submit
    ratings_acknowledged: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    abandoned_submits: int = 0
    joined: int = 0
    acknowledged_at: list[float] = field(default_factory=list)  # monotonic time of each ack

    def record(self, answer: Answer) -> None:
        with self.lock:
            self.requests += 1
            self.statuses[answer.status] += 1
            if answer.status >= 500 and not _clean_unavailable(answer):
                self.unclean_errors.append(f"{answer.status} {answer.body[:300]!r}")

    def transport(self) -> None:
        with self.lock:
            self.requests += 1
            self.transport_errors += 1


def _clean_unavailable(answer: Answer) -> bool:
    text = answer.body.decode(errors="replace")
    return (
        answer.status == 503
        and "Traceback" not in text
        and "<html" not in text.lower()
        and "temporarily unavailable" in text
    )


def _send(client: Client, counts: LoadCounts, method: str, path: str, payload: Any = None):
    try:
        answer = client.request(method, path, payload)
    except TransportError:
        counts.transport()
        return None
    counts.record(answer)
    return answer


def _ratings(body: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    keys = [question["key"] for question in body.get("questions", [])] or list(QUESTION_KEYS)
    return {
        "ratings": [
            {"candidate_id": candidate["id"], **{key: rng.randint(3, 5) for key in keys}}
            for candidate in body["candidates"]
        ],
        "client_timing": {"active_ms": rng.randint(20000, 60000), "video_played_ms": 10000},
    }


def _worker(
    index: int,
    port: int,
    counts: LoadCounts,
    *,
    load_until: float,
    settle_until: float,
    pause: float,
) -> None:
    rng = random.Random(index)
    anonymous = Client(port)
    token = ""
    while not token and time.monotonic() < settle_until:
        answer = _send(
            anonymous,
            counts,
            "POST",
            f"/api/v1/campaigns/{CAMPAIGN}/join",
            # A Prolific-shaped id: the stack runs the production id check.
            {"platform": "prolific", "external_id": f"{index:024x}", "study_id": "s"},
        )
        if answer is not None and answer.status == 200:
            token = json.loads(answer.body)["worker_token"]
        else:
            time.sleep(0.2)
    anonymous.close()
    if not token:
        return
    with counts.lock:
        counts.joined += 1
    client = Client(port, token)
    try:
        while time.monotonic() < load_until:
            answer = _send(client, counts, "POST", "/api/v1/worker/assignments/next")
            if answer is None or answer.status >= 500 or answer.status == 429:
                time.sleep(0.2)
                continue
            if answer.status == 204:
                return
            if answer.status != 200:
                with counts.lock:
                    counts.refused[f"next:{answer.status}"] += 1
                time.sleep(0.2)
                continue
            offer = json.loads(answer.body)
            assignment_id = int(offer["assignment_id"])
            body = _ratings(offer, rng)
            # Until acknowledged: the same body again after a lost answer (the worker page does
            # the same), also past the end of the load, within the settle time.
            while True:
                answer = _send(
                    client,
                    counts,
                    "POST",
                    f"/api/v1/worker/assignments/{assignment_id}/submit",
                    body,
                )
                if answer is not None and answer.status in (200, 201):
                    with counts.lock:
                        (counts.created if answer.status == 201 else counts.repeated).add(
                            assignment_id
                        )
                        counts.ratings_acknowledged += len(body["ratings"])
                        counts.acknowledged_at.append(time.monotonic())
                    break
                if answer is not None and answer.status < 500 and answer.status != 429:
                    with counts.lock:
                        counts.refused[f"submit:{answer.status}"] += 1
                    break
                if time.monotonic() >= settle_until:
                    with counts.lock:
                        counts.abandoned_submits += 1
                    return
                time.sleep(0.2)
            if pause:
                time.sleep(pause)
    finally:
        client.close()


@dataclass
class Fault:
    """What to do to the stack, and when (seconds after the load starts)."""

    name: str
    start_at: float
    begin: Callable[[], None]
    end_at: float | None = None  # None: the fault lasts until the load ends
    end: Callable[[], None] | None = None
    events: dict[str, float] = field(default_factory=dict)


def run_load(
    stack: Stack,
    *,
    workers: int,
    duration: float,
    fault: Fault | None = None,
    settle: float = 30.0,
    pause: float = 0.0,
) -> dict[str, Any]:
    """Drive the stack with `workers` threads for `duration` seconds, applying `fault` on the way;
    returns the counts, checked against the database."""
    counts = LoadCounts()
    started = time.monotonic()
    load_until = started + duration
    settle_until = load_until + settle
    threads = [
        threading.Thread(
            target=_worker,
            args=(index, stack.port, counts),
            kwargs={"load_until": load_until, "settle_until": settle_until, "pause": pause},
            daemon=True,
        )
        for index in range(workers)
    ]
    for thread in threads:
        thread.start()
    if fault is not None:
        time.sleep(max(0.0, started + fault.start_at - time.monotonic()))
        fault.events["begin_s"] = round(time.monotonic() - started, 2)
        fault.begin()
        fault.events["begun_s"] = round(time.monotonic() - started, 2)
        if fault.end is not None and fault.end_at is not None:
            time.sleep(max(0.0, started + fault.end_at - time.monotonic()))
            fault.events["end_s"] = round(time.monotonic() - started, 2)
            fault.end()
            fault.events["ended_s"] = round(time.monotonic() - started, 2)
    for thread in threads:
        thread.join(max(1.0, settle_until - time.monotonic() + 35))
    elapsed = time.monotonic() - started
    phases: dict[str, int] = {}
    if fault is not None:
        begin = started + fault.events["begin_s"]
        end = started + fault.events.get("ended_s", elapsed)
        phases = {
            "acknowledged_before_fault": sum(1 for t in counts.acknowledged_at if t < begin),
            "acknowledged_during_fault": sum(1 for t in counts.acknowledged_at if begin <= t < end),
            "acknowledged_after_fault": sum(1 for t in counts.acknowledged_at if t >= end),
        }
    return {
        "fault": fault.name if fault else None,
        "fault_events_s": fault.events if fault else {},
        "workers": workers,
        "joined": counts.joined,
        "elapsed_s": round(elapsed, 1),
        "threads_still_running": sum(thread.is_alive() for thread in threads),
        "requests_tried": counts.requests,
        "statuses": {str(status): n for status, n in sorted(counts.statuses.items())},
        "transport_errors": counts.transport_errors,
        "http_5xx": sum(n for status, n in counts.statuses.items() if status >= 500),
        "http_500": sum(n for status, n in counts.statuses.items() if status == 500),
        "http_503": counts.statuses.get(503, 0),
        "unclean_5xx": len(counts.unclean_errors),
        "unclean_5xx_examples": counts.unclean_errors[:3],
        "refused": dict(counts.refused),
        "abandoned_submits": counts.abandoned_submits,
        **phases,
        **stored_counts(stack, counts),
    }


def stored_counts(stack: Stack, counts: LoadCounts) -> dict[str, Any]:
    """Acknowledged submissions against what the database holds."""
    rows = stack.sql(
        """SELECT a.id, count(j.id) FROM annotation_assignment a
           JOIN annotation_campaign c ON c.id = a.campaign_id
           LEFT JOIN annotation_judgment j ON j.assignment_id = a.id
           WHERE c.slug = %s AND a.status = 'submitted' GROUP BY a.id""",
        (CAMPAIGN,),
    )
    stored = {assignment for assignment, _ in rows}
    acknowledged = counts.created | counts.repeated
    return {
        "submissions_acknowledged": len(acknowledged),
        "submissions_acknowledged_201": len(counts.created),
        "submissions_acknowledged_200_repeat": len(counts.repeated - counts.created),
        "submissions_stored": len(stored),
        "lost_acknowledged": len(acknowledged - stored),
        "stored_unacknowledged": len(stored - acknowledged),
        "judgments_acknowledged": counts.ratings_acknowledged,
        "judgments_stored": sum(n for _, n in rows),
    }


def stale_quality_counts(stack: Stack) -> dict[str, int]:
    """Quality work not done yet: active workers whose statistics are older than their last
    judgment (or missing), and candidates whose stored counts differ from their judgments."""
    workers = stack.sql(
        """SELECT count(*) FROM annotation_participation p
           JOIN annotation_campaign c ON c.id = p.campaign_id
           LEFT JOIN annotation_workerqcstats q ON q.participation_id = p.id
           WHERE c.slug = %s AND p.status = 'active'
             AND EXISTS (SELECT 1 FROM annotation_judgment j WHERE j.participation_id = p.id)
             AND (q.id IS NULL OR q.computed_at < (SELECT max(j.created_at)
                  FROM annotation_judgment j WHERE j.participation_id = p.id))""",
        (CAMPAIGN,),
    )[0][0]
    with_stats = stack.sql(
        """SELECT count(*) FROM annotation_workerqcstats q
           JOIN annotation_participation p ON p.id = q.participation_id
           JOIN annotation_campaign c ON c.id = p.campaign_id WHERE c.slug = %s""",
        (CAMPAIGN,),
    )[0][0]
    return {"workers_with_stale_stats": int(workers), "workers_with_stats": int(with_stats)}


# --- The scenarios (tests/hardening/test_faults_under_load.py, bench/faults.py) -------------------


def redis_stopped_scenario(
    *,
    clips: int,
    workers: int,
    duration: float,
    down_from: float,
    down_until: float,
    pause: float = 0.05,
    catch_up_timeout: float = 120.0,
) -> dict[str, Any]:
    """Redis (broker and cache) stopped during the load and started again before its end, with a
    real Celery worker running; then beat's quality sweep is published and the statistics the
    outage left stale are awaited."""
    with running_stack(clips=clips) as stack:
        stack.start_celery()
        stale_while_down: dict[str, int] = {}

        def restart_redis() -> None:
            # Before Redis comes back: the quality work of the outage's submissions is pending.
            stale_while_down.update(stale_quality_counts(stack))
            stack.redis.start()

        fault = Fault(
            "redis stopped",
            start_at=down_from,
            begin=stack.redis.stop,
            end_at=down_until,
            end=restart_redis,
        )
        result = run_load(stack, workers=workers, duration=duration, fault=fault, pause=pause)
        result["stale_quality_while_down"] = stale_while_down
        result["stale_quality_after_load"] = stale_quality_counts(stack)
        started = time.monotonic()
        stack.send_task("annotation.quality_sweep")
        try:
            wait_until(
                lambda: stale_quality_counts(stack)["workers_with_stale_stats"] == 0,
                timeout=catch_up_timeout,
                interval=0.5,
                message="the quality sweep",
            )
            result["quality_caught_up_s"] = round(time.monotonic() - started, 1)
        except TimeoutError:
            result["quality_caught_up_s"] = None
            result["celery_log_tail"] = stack.log("celery.log")[-3000:]
        result["stale_quality_after_sweep"] = stale_quality_counts(stack)
        return result


def postgres_restarted_scenario(
    *,
    clips: int,
    workers: int,
    duration: float,
    down_from: float,
    down_until: float,
    pause: float = 0.05,
) -> dict[str, Any]:
    """PostgreSQL stopped with `pg_ctl -m immediate` (a crash: no checkpoint, clients cut off)
    during the load, and started again before its end."""
    with running_stack(clips=clips) as stack:
        fault = Fault(
            "postgres restarted (immediate stop)",
            start_at=down_from,
            begin=lambda: stack.postgres.stop(mode="immediate"),
            end_at=down_until,
            end=stack.postgres.start,
        )
        result = run_load(stack, workers=workers, duration=duration, fault=fault, pause=pause)
        if result["unclean_5xx"]:
            result["gunicorn_log_tail"] = stack.log("gunicorn.log")[-3000:]
        return result
