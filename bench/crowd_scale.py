"""A realistic crowd at scale (issue 17, point 5): thousands of simulated workers who pause.

    flock /tmp/lepus-bench.lock python bench/crowd_scale.py --workers 5000 --duration 600
    python bench/crowd_scale.py --workers 200 --duration 60 --think 2:5 --clips 2000   # small
    python bench/crowd_scale.py --ramp 5000,7500,10000 --duration 180                  # ramp
    python bench/crowd_scale.py summarize RAW RAW RAW        # median, min, max of recorded runs

Each invocation builds its own world from a clean state with the pieces of `bench/load_workers.py`
(imported, unchanged): a private PostgreSQL cluster and a private Redis on unix sockets, `migrate`,
N clips x 3 candidates x 10 references (clips `ready`, video files absent: nothing fetches media),
a campaign made by `create_campaign`, then the production processes of docs/deployment.md on this
machine: one gunicorn (`--workers 2*cores --worker-class gthread --threads 4 --timeout 120`,
gunicorn's default keep-alive and worker_connections unless given), one Celery worker
(`-Q default --concurrency <cores>`) and celery beat. Everything is stopped and removed at the end.

The load generator is one process with one asyncio event loop and a minimal HTTP/1.1 client on
asyncio streams (no thread per worker). Worker i joins (`POST /api/v1/campaigns/<slug>/join`, as a
Prolific participant) at a time drawn uniformly over the first `--join-over` seconds, then loops
`next` -> think -> `submit` until the run's duration is over. A think time is drawn per clip,
uniformly from `--think` (20-90 s); `--fast-share` of the workers (2 %) are "fast" and draw from
`--fast-think` (3-8 s), above the campaign's `min_seconds_on_clip` (3 s). Connections behave like
a browser's: a connection is reused while the server keeps it open (gunicorn closes an idle one
after its keep-alive, so after a 20-90 s pause the next request opens a new one); a request that
finds a reused connection closed before any byte of an answer is sent again once on a new
connection, as browsers do (counted). `--connection close` opens one connection per request.

Ratings are those of attentive people: every (candidate, question) has a true score, drawn once,
and each worker rates it `round(true + N(0, --rating-noise))`, clipped to 1..5. The campaign keeps
the default quality rules (uniform, failed controls, low agreement: exclude) except the speed rule
`too_fast`, set to flag: the fast workers are meant to be fast, not excluded. A worker excluded
anyway is counted (`workers_excluded`); its 403 on `next` is not an error.

Reported per run (and per minute): p50/p95/p99 of join, `next` and `submit`; cycles/s (a cycle = a
`next` that returned a clip and an acknowledged submit); errors by kind; server CPU by process tree
(web, database, Redis, Celery worker, beat) overall, per cycle and per 10 s interval; the load
generator's own CPU; peak memory (PSS) per tree; PostgreSQL client connections; gunicorn's
established connections and listen queue; the load average; and correctness counted from the
database afterwards (`load_workers.LepusTarget.correctness`: over-quota candidates, repeated clips,
lost / duplicated / unacknowledged submissions). One raw file per invocation via provenance.py.
`--pg-stat-statements` loads pg_stat_statements in the private cluster (shared_preload_libraries)
and records each step's statements (calls and executor time, per cycle) in the raw file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO_ROOT / "bench"
sys.path.insert(0, str(BENCH_DIR))

import load_workers as lw  # noqa: E402  (world set-up, /proc accounting, correctness counts)
import stack_profile  # noqa: E402  (py-spy samples of the Celery worker, --py-spy)
from provenance import write_raw  # noqa: E402

QUESTION_KEYS = lw.QUESTION_KEYS
CLOCK_TICKS = lw.CLOCK_TICKS


def log(message: str) -> None:
    sys.stderr.write(f"[crowdscale {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------------------------------
# A minimal HTTP/1.1 client on asyncio streams
# --------------------------------------------------------------------------------------------------


class StaleConnection(Exception):
    """A reused connection was found closed before any byte of the answer arrived."""


class Transport(Exception):
    """Connection refused/reset or timed out: the outcome on the server is unknown."""


class Connection:
    """One browser tab's connection to one server: reused while the server keeps it open."""

    def __init__(self, host: str, port: int, *, keep_alive: bool, timeout: float) -> None:
        self.host = host
        self.port = port
        self.keep_alive = keep_alive
        self.timeout = timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.opened = 0
        self.stale_retries = 0

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    def _usable(self) -> bool:
        return (
            self.writer is not None
            and self.reader is not None
            and not self.reader.at_eof()
            and not self.writer.is_closing()
        )

    async def request(
        self, method: str, path: str, body: bytes | None, headers: str
    ) -> tuple[int, bytes]:
        reused = self._usable()
        if not reused:
            self.close()
        try:
            return await asyncio.wait_for(
                self._exchange(method, path, body, headers, reused=reused), self.timeout
            )
        except StaleConnection:
            # As a browser does: the request never reached a live connection; send it again once.
            self.close()
            self.stale_retries += 1
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as error:
            self.close()
            raise Transport(f"{type(error).__name__}: {error}") from error
        try:
            return await asyncio.wait_for(
                self._exchange(method, path, body, headers, reused=False), self.timeout
            )
        except (
            TimeoutError,
            OSError,
            asyncio.IncompleteReadError,
            ValueError,
            StaleConnection,
        ) as error:
            self.close()
            raise Transport(f"{type(error).__name__}: {error}") from error

    async def _exchange(
        self, method: str, path: str, body: bytes | None, headers: str, *, reused: bool
    ) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.opened += 1
        assert self.reader is not None and self.writer is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{headers}"
        if not self.keep_alive:
            head += "Connection: close\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        data = head.encode() + b"\r\n" + (body or b"")
        try:
            self.writer.write(data)
            await self.writer.drain()
            status_line = await self.reader.readline()
        except (ConnectionResetError, BrokenPipeError):
            if reused:
                raise StaleConnection() from None
            raise
        if not status_line:
            if reused:
                raise StaleConnection()
            raise asyncio.IncompleteReadError(b"", None)
        status = int(status_line.split(b" ", 2)[1])
        raw_headers = await self.reader.readuntil(b"\r\n\r\n")
        length = None
        chunked = False
        close = not self.keep_alive
        for line in raw_headers.split(b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        if chunked:
            parts = []
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            payload = b"".join(parts)
        elif length is not None:
            payload = await self.reader.readexactly(length) if length else b""
        elif status in (204, 304) or 100 <= status < 200:
            payload = b""
        else:
            payload = await self.reader.read()
            close = True
        if close:
            self.close()
        return status, payload


# --------------------------------------------------------------------------------------------------
# The simulated crowd
# --------------------------------------------------------------------------------------------------


@dataclass
class Crowd:
    """Everything the workers of one run share: their parameters and what they measured."""

    host: str
    port: int
    slug: str
    prefix: str
    workers: int
    duration: float
    join_over: float
    think: tuple[float, float]
    fast_think: tuple[float, float]
    fast_share: float
    rating_noise: float
    keep_alive: bool
    timeout: float
    seed: int
    started: float = 0.0
    deadline: float = 0.0
    # (seconds since the start, milliseconds, status) per request kind.
    samples: dict[str, list[tuple[float, float, int]]] = field(
        default_factory=lambda: {"join": [], "next": [], "submit": []}
    )
    errors: Counter = field(default_factory=Counter)
    error_examples: dict[str, str] = field(default_factory=dict)
    acknowledged: list[lw.Acknowledged] = field(default_factory=list)
    ack_times: list[float] = field(default_factory=list)
    served_twice: int = 0
    unknown_outcome: int = 0
    excluded: int = 0
    exhausted: int = 0
    stale_retries: int = 0
    connections_opened: int = 0
    joined: int = 0
    fast_workers: int = 0
    in_think: int = 0
    live: int = 0

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        self.error_examples.setdefault(kind, detail[:300])


def true_score(candidate: Any, question: str) -> float:
    """The candidate's 'real' quality on one question, the same for every worker."""
    return 1.0 + 4.0 * (zlib.crc32(f"{candidate}:{question}".encode()) / 0xFFFFFFFF)


def human_ratings(work: dict[str, Any], rng: random.Random, noise: float) -> list[dict[str, Any]]:
    keys = [question["key"] for question in work.get("questions", [])] or list(QUESTION_KEYS)
    return [
        {
            "candidate_id": candidate["id"],
            **{
                key: min(5, max(1, round(true_score(candidate["id"], key) + rng.gauss(0, noise))))
                for key in keys
            },
        }
        for candidate in work["candidates"]
    ]


async def timed(
    crowd: Crowd, kind: str, connection: Connection, method: str, path: str, body: Any, auth: str
) -> tuple[int, bytes]:
    payload = None if body is None else json.dumps(body).encode()
    started = time.perf_counter()
    status, data = await connection.request(method, path, payload, auth)
    crowd.samples[kind].append(
        (time.monotonic() - crowd.started, (time.perf_counter() - started) * 1000.0, status)
    )
    return status, data


async def one_worker(crowd: Crowd, index: int) -> None:
    rng = random.Random(crowd.seed * 1_000_003 + index)
    fast = rng.random() < crowd.fast_share
    low, high = crowd.fast_think if fast else crowd.think
    crowd.fast_workers += fast
    await asyncio.sleep(rng.uniform(0, crowd.join_over))
    connection = Connection(
        crowd.host, crowd.port, keep_alive=crowd.keep_alive, timeout=crowd.timeout
    )
    base = "Accept: application/json\r\n"
    try:
        try:
            status, data = await timed(
                crowd,
                "join",
                connection,
                "POST",
                f"/api/v1/campaigns/{crowd.slug}/join",
                {
                    "platform": "prolific",
                    "external_id": f"{crowd.prefix}-{index:05d}",
                    "study_id": f"study-{crowd.slug}",
                    "session_id": f"session-{crowd.prefix}-{index:05d}",
                },
                base,
            )
        except Transport as error:
            crowd.error("join:transport", str(error))
            return
        if status not in (200, 201):
            crowd.error(f"join:{status}", data.decode(errors="replace"))
            return
        crowd.joined += 1
        auth = base + f"Authorization: Worker {json.loads(data)['worker_token']}\r\n"
        seen: set[str] = set()
        failures = 0
        while time.monotonic() < crowd.deadline and failures < 20:
            try:
                status, data = await timed(
                    crowd, "next", connection, "POST", "/api/v1/worker/assignments/next", None, auth
                )
            except Transport as error:
                crowd.error("next:transport", str(error))
                failures += 1
                await asyncio.sleep(1.0)
                continue
            if status == 204:
                crowd.exhausted += 1
                return
            if status == 403:
                # Excluded by quality control (or the campaign closed): the worker's run is over.
                crowd.excluded += 1
                crowd.error("next:403", data.decode(errors="replace"))
                return
            if status != 200:
                crowd.error(f"next:{status}", data.decode(errors="replace"))
                failures += 1
                await asyncio.sleep(1.0)
                continue
            work = json.loads(data)
            clip = str(work["clip"]["id"])
            if clip in seen:
                crowd.served_twice += 1
            seen.add(clip)
            think = rng.uniform(low, high)
            if time.monotonic() + think > crowd.deadline:
                # Still watching when the run ends: the lease stays live, nothing is submitted.
                return
            crowd.in_think += 1
            await asyncio.sleep(think)
            crowd.in_think -= 1
            ratings = human_ratings(work, rng, crowd.rating_noise)
            body = {
                "ratings": ratings,
                "client_timing": {
                    "active_ms": int(think * 1000),
                    "video_played_ms": int(min(think, 10.0) * 1000),
                },
            }
            assignment = int(work["assignment_id"])
            try:
                status, data = await timed(
                    crowd,
                    "submit",
                    connection,
                    "POST",
                    f"/api/v1/worker/assignments/{assignment}/submit",
                    body,
                    auth,
                )
            except Transport as error:
                crowd.error("submit:transport", str(error))
                crowd.unknown_outcome += 1
                failures += 1
                continue
            if status in (200, 201):
                failures = 0
                crowd.acknowledged.append(lw.Acknowledged(index, assignment, clip, len(ratings)))
                crowd.ack_times.append(time.monotonic() - crowd.started)
            else:
                crowd.error(f"submit:{status}", data.decode(errors="replace"))
                if status >= 500:
                    crowd.unknown_outcome += 1
                failures += 1
    finally:
        crowd.stale_retries += connection.stale_retries
        crowd.connections_opened += connection.opened
        connection.close()


async def drive(crowd: Crowd) -> None:
    crowd.started = time.monotonic()
    crowd.deadline = crowd.started + crowd.duration
    tasks = [asyncio.create_task(one_worker(crowd, index)) for index in range(crowd.workers)]
    await asyncio.gather(*tasks, return_exceptions=False)


# --------------------------------------------------------------------------------------------------
# Monitoring: CPU per tree, connections, load, every few seconds (in a thread, off the event loop)
# --------------------------------------------------------------------------------------------------


def tcp_counts(port: int) -> dict[str, int]:
    """Sockets of the server's port from /proc/net/tcp: established, TIME_WAIT, listen queue."""
    hex_port = f":{port:04X}"
    established = time_wait = listen_queue = 0
    with contextlib.suppress(OSError), open("/proc/net/tcp") as handle:
        next(handle)
        for line in handle:
            fields = line.split()
            if not fields[1].endswith(hex_port):
                continue
            state = fields[3]
            if state == "01":
                established += 1
            elif state == "06":
                time_wait += 1
            elif state == "0A":
                listen_queue = int(fields[4].split(":")[1], 16)
    return {"established": established, "time_wait": time_wait, "listen_queue": listen_queue}


class Monitor:
    def __init__(
        self,
        roots: dict[str, int],
        *,
        port: int,
        dsn: str,
        crowd: Crowd,
        interval: float = 10.0,
    ) -> None:
        self.roots = roots
        self.port = port
        self.dsn = dsn
        self.crowd = crowd
        self.interval = interval
        self.series: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)
        self._connection: Any = None

    def _db_connections(self) -> dict[str, int]:
        import psycopg2

        try:
            if self._connection is None:
                self._connection = psycopg2.connect(self.dsn)
                self._connection.autocommit = True
            with self._connection.cursor() as cursor:
                cursor.execute(
                    "SELECT coalesce(state, '?'), count(*) FROM pg_stat_activity"
                    " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    " GROUP BY 1"
                )
                return {state: int(count) for state, count in cursor.fetchall()}
        except Exception:  # a monitoring gap is recorded, not fatal
            self._connection = None
            return {"unreadable": 1}

    def _sample(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        now = time.monotonic()
        ticks = {name: lw.tree_cpu_ticks(pid) for name, pid in self.roots.items()}
        usage = resource.getrusage(resource.RUSAGE_SELF)
        sample: dict[str, Any] = {
            "t": round(now - self.crowd.started, 1) if self.crowd.started else 0.0,
            "_mono": now,
            "_ticks": ticks,
            "_generator_s": usage.ru_utime + usage.ru_stime,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "db_connections": self._db_connections(),
            "tcp": tcp_counts(self.port),
            "workers_joined": self.crowd.joined,
            "workers_thinking": self.crowd.in_think,
            "acknowledged": len(self.crowd.acknowledged),
        }
        if previous is not None:
            seconds = now - previous["_mono"]
            sample["cpu_cores_by_tree"] = {
                name: round((ticks[name] - previous["_ticks"][name]) / CLOCK_TICKS / seconds, 3)
                for name in ticks
            }
            sample["cpu_cores_generator"] = round(
                (sample["_generator_s"] - previous["_generator_s"]) / seconds, 3
            )
            sample["cycles_per_s"] = round(
                (sample["acknowledged"] - previous["acknowledged"]) / seconds, 2
            )
        return sample

    def _run(self) -> None:
        previous = self._sample(None)
        while not self._stop.wait(self.interval):
            current = self._sample(previous)
            self.series.append(current)
            previous = current

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=30)
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
        return [{k: v for k, v in s.items() if not k.startswith("_")} for s in self.series]


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "p50_ms": lw.percentile(values, 0.50),
        "p95_ms": lw.percentile(values, 0.95),
        "p99_ms": lw.percentile(values, 0.99),
        "max_ms": round(max(values), 2) if values else None,
    }


def latency_tables(crowd: Crowd) -> dict[str, Any]:
    overall = {kind: summary([ms for _, ms, _ in rows]) for kind, rows in crowd.samples.items()}
    # After the arrivals (from join_over + 10 s on): the steady crowd without the join surge.
    settled = crowd.join_over + 10
    after_joins = {
        kind: summary([ms for t, ms, _ in crowd.samples[kind] if t >= settled])
        for kind in ("next", "submit")
    }
    minutes = int(crowd.duration // 60) + 1
    per_minute = []
    for minute in range(minutes):
        low, high = minute * 60.0, (minute + 1) * 60.0
        entry: dict[str, Any] = {"minute": minute + 1}
        for kind, rows in crowd.samples.items():
            entry[kind] = summary([ms for t, ms, _ in rows if low <= t < high])
        entry["cycles"] = sum(1 for t in crowd.ack_times if low <= t < high)
        per_minute.append(entry)
    # Per 10 s window, to set beside the monitor's series (CPU, load average of the machine).
    windows = []
    for index in range(int(crowd.duration // 10) + 1):
        low, high = index * 10.0, (index + 1) * 10.0
        window: dict[str, Any] = {"t_end": high}
        for kind in ("next", "submit"):
            values = [ms for t, ms, _ in crowd.samples[kind] if low <= t < high]
            window[kind] = [
                len(values),
                lw.percentile(values, 0.50),
                lw.percentile(values, 0.95),
                lw.percentile(values, 0.99),
            ]
        windows.append(window)
    return {
        "overall": overall,
        "after_joins": after_joins,
        "per_minute": per_minute,
        "per_10s": windows,
    }


# --------------------------------------------------------------------------------------------------
# The world: private PostgreSQL, Redis, migrate, seed, campaign, gunicorn, Celery worker, beat
# --------------------------------------------------------------------------------------------------


def production_env(bench: lw.Bench) -> dict[str, str]:
    env = lw.lepus_env(bench)
    # Production throttles for next/submit/me (per participation): a person never reaches them.
    # Join is throttled per client address and every simulated worker comes from 127.0.0.1,
    # where real workers come from thousands of addresses: only join's is raised.
    for key in ("LEPUS_THROTTLE_NEXT", "LEPUS_THROTTLE_SUBMIT", "LEPUS_THROTTLE_ME"):
        env.pop(key, None)
    env["LEPUS_THROTTLE_JOIN"] = "1000000/min"
    return env


CAMPAIGN_SCRIPT = """
import json, os, sys
sys.path.insert(0, os.getcwd())
import django
django.setup()
from io import StringIO
from django.core.management import call_command
from annotation.models import Campaign
slug, min_seconds = sys.argv[1], sys.argv[2]
out = StringIO()
call_command("create_campaign", "--slug", slug, "--judgments-per-candidate", sys.argv[3],
             "--system", "loadbench-system", "--min-seconds-on-clip", min_seconds, "--json",
             stdout=out)
created = json.loads(out.getvalue().strip().splitlines()[-1])
rules = {"too_fast": {"action": "flag"}}
Campaign.objects.filter(slug=slug).update(qc_rules=rules)
campaign = Campaign.objects.get(slug=slug)
created.update(qc_rules=rules, min_seconds_on_clip=campaign.min_seconds_on_clip,
               lease_seconds=campaign.lease_seconds, control_rate=campaign.control_rate)
print(json.dumps(created))
"""


def create_campaign(env: dict[str, str], slug: str, args: argparse.Namespace) -> dict[str, Any]:
    done = subprocess.run(
        [
            lw.lepus_python(),
            "-c",
            CAMPAIGN_SCRIPT,
            slug,
            str(args.min_seconds_on_clip),
            str(args.judgments),
        ],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def server_options(args: argparse.Namespace, port: int) -> lw.ServerOptions:
    """This benchmark's choices: 120 s time-out, gunicorn's keep-alive, backlog and worker
    connections unless given, `--celery-concurrency` Celery children."""
    return lw.ServerOptions(
        port=port,
        gunicorn_workers=args.gunicorn_workers,
        gunicorn_threads=args.gunicorn_threads,
        timeout=120,
        keep_alive=args.keep_alive,
        backlog=args.backlog,
        worker_connections=args.worker_connections,
        celery_concurrency=args.celery_concurrency,
    )


def start_gunicorn(
    bench: lw.Bench, env: dict[str, str], args: argparse.Namespace
) -> tuple[int, int, dict[str, list[str]]]:
    """gunicorn started; returns its port, its pid and every command of `lw.server_commands`."""
    port = lw.free_port()
    commands = lw.server_commands(server_options(args, port))
    process = bench.services.start(
        "lepus-gunicorn",
        commands["gunicorn"],
        env=env,
        log_path=bench.root / "gunicorn.log",
        cwd=REPO_ROOT,
    )
    base_url = f"http://127.0.0.1:{port}"
    lw.wait_for(lambda: lw.http_ok(base_url, "/healthz"), timeout=60, what="gunicorn")
    return port, process.pid, commands


def start_celery(
    bench: lw.Bench, env: dict[str, str], commands: dict[str, list[str]]
) -> dict[str, int]:
    worker = bench.services.start(
        "lepus-celery",
        commands["celery"],
        env=env,
        log_path=bench.root / "celery.log",
        cwd=REPO_ROOT,
    )
    beat = bench.services.start(
        "lepus-beat", commands["beat"], env=env, log_path=bench.root / "beat.log", cwd=REPO_ROOT
    )
    return {"celery": worker.pid, "beat": beat.pid}


def raise_fd_limit() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------------------------------------
# pg_stat_statements (option --pg-stat-statements): what the database spent its time on
# --------------------------------------------------------------------------------------------------

PG_STAT_STATEMENTS_SETTINGS = (
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.max=2000",
    "pg_stat_statements.track=top",
)
PARAMETER_LIST = re.compile(r"\$\d+(?:\s*,\s*\$\d+)*")


def statements_enable(bench: lw.Bench) -> None:
    import psycopg2

    connection = psycopg2.connect(bench.pg_dsn("lepus"))
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    connection.close()


def statements_reset(bench: lw.Bench) -> None:
    lw.sql_rows(bench.pg_dsn("lepus"), "SELECT pg_stat_statements_reset()")


def statements_top(bench: lw.Bench, cycles: int, limit: int = 40) -> dict[str, Any]:
    """Every statement of the `lepus` database since the reset, summed, and the top `limit`.

    Per statement: calls, total and mean execution time, rows, shared blocks hit and read, and
    calls and milliseconds per cycle, ordered by total execution time; per family of statements
    (the same first 100 characters: one IN list per length is a statement of its own), the
    same sums. Time is the backend's
    wall time inside the executor, not its CPU: comparable between two trees run alike.
    """
    rows = lw.sql_rows(
        bench.pg_dsn("lepus"),
        "SELECT s.query, s.calls, s.total_exec_time, s.total_plan_time, s.rows,"
        " s.shared_blks_hit, s.shared_blks_read FROM pg_stat_statements s"
        " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'lepus'"
        " ORDER BY s.total_exec_time DESC",
    )
    per_cycle = 1 / cycles if cycles else 0.0
    total_ms = sum(row[2] for row in rows)
    # One IN list per length is one statement to pg_stat_statements: a family is the statements
    # alike once each list of parameters is one `$n` (their first 160 characters), summed.
    families: dict[str, list[float]] = {}
    for query, calls, exec_ms, _plan, _rows, _hit, _read in rows:
        key = PARAMETER_LIST.sub("$n", " ".join(query.split()))[:160]
        family = families.setdefault(key, [0, 0.0, 0])
        family[0] += calls
        family[1] += exec_ms
        family[2] += 1
    return {
        "statements": len(rows),
        "calls": sum(row[1] for row in rows),
        "exec_ms": round(total_ms, 1),
        "calls_per_cycle": round(sum(row[1] for row in rows) * per_cycle, 2),
        "exec_ms_per_cycle": round(total_ms * per_cycle, 3),
        "top": [
            {
                "query": " ".join(query.split())[:600],
                "calls": calls,
                "calls_per_cycle": round(calls * per_cycle, 3),
                "exec_ms": round(exec_ms, 1),
                "exec_ms_per_cycle": round(exec_ms * per_cycle, 4),
                "mean_ms": round(exec_ms / calls, 4) if calls else None,
                "plan_ms": round(plan_ms, 1),
                "rows": rows_returned,
                "blocks_hit": hit,
                "blocks_read": read,
            }
            for query, calls, exec_ms, plan_ms, rows_returned, hit, read in rows[:limit]
        ],
        "families": [
            {
                "query": query,
                "statements": int(statements),
                "calls_per_cycle": round(calls * per_cycle, 3),
                "exec_ms_per_cycle": round(exec_ms * per_cycle, 4),
            }
            for query, (calls, exec_ms, statements) in sorted(
                families.items(), key=lambda item: -item[1][1]
            )[:limit]
        ],
    }


def run_step(
    *,
    bench: lw.Bench,
    env: dict[str, str],
    args: argparse.Namespace,
    port: int,
    roots: dict[str, int],
    workers: int,
    step: int,
) -> dict[str, Any]:
    slug = f"crowd-{workers}-s{step}"
    campaign = create_campaign(env, slug, args)
    log(f"campaign {campaign}")
    lw.analyze_database(bench, "lepus")
    # Warm every web process (imports, database connections) with a few read-only requests.
    for _ in range(4 * args.gunicorn_workers):
        lw.http_ok(f"http://127.0.0.1:{port}", "/healthz")
    waited = lw.wait_until_idle(roots)
    crowd = Crowd(
        host="127.0.0.1",
        port=port,
        slug=slug,
        prefix=f"cs{step}",
        workers=workers,
        duration=args.duration,
        join_over=args.join_over,
        think=args.think,
        fast_think=args.fast_think,
        fast_share=args.fast_share,
        rating_noise=args.rating_noise,
        keep_alive=args.connection == "keep-alive",
        timeout=args.request_timeout,
        seed=args.seed + step,
    )
    sampler = lw.TreeSampler(roots, interval=2.0)
    monitor = Monitor(roots, port=port, dsn=bench.pg_dsn("lepus"), crowd=crowd)
    load_start = [round(value, 2) for value in os.getloadavg()]
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    if args.pg_stat_statements:
        statements_reset(bench)
    sampler.start()
    monitor.start()
    stacks_path = (
        REPO_ROOT
        / "bench"
        / "results"
        / time.strftime(f"crowd_scale_celery_stacks_%Y-%m-%dT%H%M%SZ_step{step}.txt", time.gmtime())
    )
    tasks_before = stack_profile.celery_task_totals(env, REPO_ROOT) if args.py_spy else {}
    spy = (
        stack_profile.start(args.py_spy, roots["celery"], stacks_path, seconds=args.duration)
        if args.py_spy
        else None
    )
    log(f"step {step}: {workers} workers for {args.duration:.0f} s")
    wall = time.perf_counter()
    asyncio.run(drive(crowd))
    elapsed = time.perf_counter() - wall
    usage_after = resource.getrusage(resource.RUSAGE_SELF)
    spy_errors = stack_profile.stop(spy) if spy is not None else ""
    tasks_after = stack_profile.celery_task_totals(env, REPO_ROOT) if args.py_spy else {}
    drained = lw.celery_queue_drainer(bench)()
    sampler.stop()
    series = monitor.stop()
    cycles = len(crowd.acknowledged)
    statements = statements_top(bench, cycles) if args.pg_stat_statements else None
    load_end = [round(value, 2) for value in os.getloadavg()]
    generator_s = (usage_after.ru_utime - usage_before.ru_utime) + (
        usage_after.ru_stime - usage_before.ru_stime
    )
    server_ms = sum(sampler.cpu_ms.values())
    log(f"step {step}: {cycles} cycles in {elapsed:.0f} s; counting correctness from the database")
    target = lw.LepusTarget(
        base_url=f"http://127.0.0.1:{port}", campaign=slug, db_dsn=bench.pg_dsn("lepus")
    )
    correctness = target.correctness(crowd.acknowledged)
    correctness["served_twice_seen_by_clients"] = crowd.served_twice
    participations = dict(
        lw.sql_rows(
            bench.pg_dsn("lepus"),
            "SELECT p.status, count(*) FROM annotation_participation p"
            " JOIN annotation_campaign c ON c.id = p.campaign_id WHERE c.slug = %s GROUP BY 1",
            (slug,),
        )
    )
    latencies = latency_tables(crowd)
    errors = {k: v for k, v in crowd.errors.items() if k != "next:403"}
    steady = [s for s in series if s["t"] >= args.join_over + 10 and "cpu_cores_by_tree" in s]
    result: dict[str, Any] = {
        "step": step,
        "workers": workers,
        "fast_workers": crowd.fast_workers,
        "workers_joined": crowd.joined,
        "duration_s": args.duration,
        "elapsed_s": round(elapsed, 1),
        "cycles": cycles,
        "cycles_per_s": round(cycles / elapsed, 2) if elapsed else None,
        "cycles_per_s_steady": round(statistics.mean(s["cycles_per_s"] for s in steady), 2)
        if steady
        else None,
        "latency": latencies["overall"],
        "latency_after_joins": latencies["after_joins"],
        "latency_per_minute": latencies["per_minute"],
        "latency_per_10s": latencies["per_10s"],
        "errors": errors,
        "errors_total": sum(errors.values()),
        "error_examples": crowd.error_examples,
        "workers_excluded_403": crowd.excluded,
        "workers_out_of_work_204": crowd.exhausted,
        "submits_with_unknown_outcome": crowd.unknown_outcome,
        "stale_connection_retries": crowd.stale_retries,
        "connections_opened": crowd.connections_opened,
        "participations_by_status": participations,
        "server_cpu_ms": {name: round(value, 1) for name, value in sampler.cpu_ms.items()},
        "server_cpu_ms_per_cycle": round(server_ms / cycles, 2) if cycles else None,
        "server_cpu_ms_per_cycle_by_tree": {
            name: round(value / cycles, 2) if cycles else None
            for name, value in sampler.cpu_ms.items()
        },
        "server_cpu_cores_mean": round(server_ms / 1000 / elapsed, 3) if elapsed else None,
        "server_cpu_cores_steady_by_tree": {
            name: round(statistics.mean(s["cpu_cores_by_tree"][name] for s in steady), 3)
            for name in roots
        }
        if steady
        else None,
        "generator_cpu_s": round(generator_s, 2),
        "generator_cpu_cores_mean": round(generator_s / elapsed, 3) if elapsed else None,
        "generator_cpu_ms_per_cycle": round(generator_s * 1000 / cycles, 2) if cycles else None,
        "server_peak_pss_mib": {
            name: round(value / 1024, 1) for name, value in sampler.peak_pss_kib.items()
        },
        "server_peak_pss_mib_total": round(sum(sampler.peak_pss_kib.values()) / 1024, 1),
        "generator_peak_rss_mib": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
        ),
        "db_client_connections_peak": max(
            (sum(s["db_connections"].values()) for s in series), default=None
        ),
        "db_active_connections_peak": max(
            (s["db_connections"].get("active", 0) for s in series), default=None
        ),
        "web_established_connections_peak": max(
            (s["tcp"]["established"] for s in series), default=None
        ),
        "web_listen_queue_peak": max((s["tcp"]["listen_queue"] for s in series), default=None),
        "time_wait_peak": max((s["tcp"]["time_wait"] for s in series), default=None),
        "load_average_at_start": load_start,
        "load_average_at_end": load_end,
        "load_average_1m_max": max((s["load_average_1m"] for s in series), default=None),
        "background_drain_s": round(drained, 1),
        "waited_for_idle_server_s": round(waited, 1),
        "campaign": campaign,
        "correctness": correctness,
        "correctness_all_zero": all(
            correctness[key] == 0 for key in lw.CORRECTNESS_KEYS if key in correctness
        ),
        "series": series,
    }
    if statements is not None:
        result["pg_stat_statements"] = statements
    if spy is not None:
        result["celery_stacks"] = {
            "file": str(stacks_path.relative_to(REPO_ROOT)),
            "py_spy_stderr_tail": spy_errors,
            "tasks_during_step": {
                name: count - tasks_before.get(name, 0) for name, count in tasks_after.items()
            },
            **(
                stack_profile.summarize(stacks_path, rate=100, cycles=cycles)
                if stacks_path.exists()
                else {}
            ),
        }
    log(step_line(result))
    return result


def step_line(result: dict[str, Any]) -> str:
    latency = result["latency"]
    return (
        f"{result['workers']} workers: {result['cycles']} cycles, {result['cycles_per_s']}/s; "
        f"next p50/p95/p99 {latency['next']['p50_ms']}/{latency['next']['p95_ms']}/"
        f"{latency['next']['p99_ms']} ms; submit {latency['submit']['p50_ms']}/"
        f"{latency['submit']['p95_ms']}/{latency['submit']['p99_ms']} ms; errors "
        f"{result['errors_total']}; server {result['server_cpu_ms_per_cycle']} ms/cycle "
        f"{result['server_cpu_ms_per_cycle_by_tree']}; generator "
        f"{result['generator_cpu_ms_per_cycle']} ms/cycle; correctness all zero: "
        f"{result['correctness_all_zero']}"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    fd_limit = raise_fd_limit()
    root = Path(tempfile.mkdtemp(prefix="crowdscale-", dir=os.environ.get("TMPDIR", "/tmp")))
    services = lw.Services()
    bench = lw.Bench(root=root, services=services, pg_socket_dir=root / "pg", pg_port=5432)
    report: dict[str, Any] = {
        "benchmark": "crowd at scale: workers with think times (issue 17, point 5)",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": lw.machine_description(),
        "parameters": {
            key: (list(value) if isinstance(value, tuple) else value)
            for key, value in vars(args).items()
            if key != "func"
        },
        "client_fd_limit": fd_limit,
        "steps": [],
    }

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        lw.start_postgres(
            bench, settings=PG_STAT_STATEMENTS_SETTINGS if args.pg_stat_statements else ()
        )
        lw.start_redis(bench)
        assert bench.redis is not None
        setup_started = time.monotonic()
        env = production_env(bench)
        args.candidates = 3
        lw.create_database(bench, "lepus")
        (bench.root / "lepus-var").mkdir(exist_ok=True)
        log("migrate")
        subprocess.run(
            [lw.lepus_python(), "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=REPO_ROOT,
            env=env,
            check=True,
        )
        if args.pg_stat_statements:
            statements_enable(bench)
        log(f"seed {args.clips} clips x 3 candidates x {args.references} references")
        subprocess.run(
            [
                lw.lepus_python(),
                "bench/lepus_bench_setup.py",
                "seed",
                "--clips",
                str(args.clips),
                "--candidates-per-clip",
                "3",
                "--references-per-clip",
                str(args.references),
            ],
            cwd=REPO_ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        port, web_pid, commands = start_gunicorn(bench, env, args)
        pids = start_celery(bench, env, commands)
        report["setup_s"] = round(time.monotonic() - setup_started, 1)
        report["server"] = {
            "gunicorn": commands["gunicorn"][1:],
            "celery": f"celery -A config worker -Q default --concurrency {args.celery_concurrency}"
            " + celery beat",
            "postgresql": "private cluster, unix socket, max_connections=300, defaults otherwise"
            + (" (pg_stat_statements loaded)" if args.pg_stat_statements else ""),
            "redis": "private, unix socket (throttle cache + broker)",
            "redis_server": lw.redis_server_version(),
            "throttles": "production defaults for next/submit/me; join raised (one client address)",
            "DATABASE_CONN_MAX_AGE": env.get("DATABASE_CONN_MAX_AGE", "default (60)"),
        }
        roots = {
            "web": web_pid,
            "database": lw.postmaster_pid(bench),
            "redis": bench.redis.pid,
            "celery": pids["celery"],
            "beat": pids["beat"],
        }
        for step, workers in enumerate(args.steps, start=1):
            report["steps"].append(
                run_step(
                    bench=bench,
                    env=env,
                    args=args,
                    port=port,
                    roots=roots,
                    workers=workers,
                    step=step,
                )
            )
    finally:
        for name, process in reversed(list(services.processes)):
            services.stop(process, sig=signal.SIGINT if name == "postgres" else signal.SIGTERM)
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    report["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    report["targets"] = [targets(step) for step in report["steps"]]
    return report


def targets(step: dict[str, Any]) -> dict[str, Any]:
    correctness = step["correctness"]
    checks = {
        "next_p95_under_50ms": (step["latency"]["next"]["p95_ms"] or 1e9) < 50,
        "submit_p95_under_50ms": (step["latency"]["submit"]["p95_ms"] or 1e9) < 50,
        "zero_errors": step["errors_total"] == 0,
        "zero_over_quota": correctness["over_quota_candidates"] == 0,
        "zero_repeated_clips": correctness["repeated_clips_per_worker"] == 0
        and correctness["served_twice_seen_by_clients"] == 0,
        "every_acknowledged_stored_once": correctness["lost_submissions"] == 0
        and correctness["duplicated_submissions"] == 0
        and correctness["stored_without_acknowledgement"] == 0,
    }
    return {"workers": step["workers"], **checks, "all_met": all(checks.values())}


# --------------------------------------------------------------------------------------------------
# Median of recorded runs
# --------------------------------------------------------------------------------------------------


def summarize(paths: list[Path]) -> dict[str, Any]:
    records = [json.loads(path.read_text()) for path in paths]
    steps = [record["figures"]["steps"][0] for record in records]
    figures = {
        "next_p50_ms": [s["latency"]["next"]["p50_ms"] for s in steps],
        "next_p95_ms": [s["latency"]["next"]["p95_ms"] for s in steps],
        "next_p99_ms": [s["latency"]["next"]["p99_ms"] for s in steps],
        "submit_p50_ms": [s["latency"]["submit"]["p50_ms"] for s in steps],
        "submit_p95_ms": [s["latency"]["submit"]["p95_ms"] for s in steps],
        "submit_p99_ms": [s["latency"]["submit"]["p99_ms"] for s in steps],
        "join_p95_ms": [s["latency"]["join"]["p95_ms"] for s in steps],
        "cycles": [s["cycles"] for s in steps],
        "cycles_per_s": [s["cycles_per_s"] for s in steps],
        "server_cpu_ms_per_cycle": [s["server_cpu_ms_per_cycle"] for s in steps],
        "generator_cpu_ms_per_cycle": [s["generator_cpu_ms_per_cycle"] for s in steps],
        "server_peak_pss_mib_total": [s["server_peak_pss_mib_total"] for s in steps],
        "errors_total": [s["errors_total"] for s in steps],
    }
    for tree in steps[0]["server_cpu_ms_per_cycle_by_tree"]:
        figures[f"server_cpu_ms_per_cycle_{tree}"] = [
            s["server_cpu_ms_per_cycle_by_tree"][tree] for s in steps
        ]
    return {
        "runs": [str(path) for path in paths],
        "workers": [s["workers"] for s in steps],
        "load_average_at_start": [s["load_average_at_start"] for s in steps],
        "load_average_at_end": [s["load_average_at_end"] for s in steps],
        "correctness_all_zero": [s["correctness_all_zero"] for s in steps],
        "figures": {
            name: {
                "values": values,
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
            for name, values in figures.items()
            if all(value is not None for value in values)
        },
    }


def parse_range(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "summarize":
        paths = [Path(p) for p in sys.argv[2:]]
        result = summarize(paths)
        write_raw("crowd_scale_summary", result)
        sys.stdout.write(json.dumps(result["figures"], indent=1) + "\n")
        return
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--workers", type=int, default=5000)
    parser.add_argument(
        "--ramp", default="", help="comma-separated worker counts, one step each (same server)"
    )
    parser.add_argument("--duration", type=float, default=600, help="seconds per step")
    parser.add_argument("--join-over", type=float, default=60)
    parser.add_argument("--think", type=parse_range, default=(20.0, 90.0), help="LOW:HIGH s")
    parser.add_argument("--fast-think", type=parse_range, default=(3.0, 8.0), help="LOW:HIGH s")
    parser.add_argument("--fast-share", type=float, default=0.02)
    parser.add_argument("--rating-noise", type=float, default=0.6)
    parser.add_argument("--min-seconds-on-clip", type=int, default=3)
    parser.add_argument(
        "--clips",
        type=int,
        default=0,
        help="clips in the world (default: enough for the offered cycles with a 1.5x margin)",
    )
    parser.add_argument("--references", type=int, default=10)
    parser.add_argument("--judgments", type=int, default=3)
    parser.add_argument("--gunicorn-workers", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--gunicorn-threads", type=int, default=4)
    parser.add_argument("--keep-alive", type=int, default=None, help="gunicorn's (default 2 s)")
    parser.add_argument("--worker-connections", type=int, default=None)
    parser.add_argument("--backlog", type=int, default=None)
    parser.add_argument("--celery-concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--connection", choices=["keep-alive", "close"], default="keep-alive")
    parser.add_argument("--request-timeout", type=float, default=30)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--pg-stat-statements",
        action="store_true",
        help="load pg_stat_statements in the private cluster and record each step's statements",
    )
    parser.add_argument(
        "--py-spy",
        metavar="BINARY",
        help="sample the Celery worker with this py-spy during each step (bench/stack_profile.py)",
    )
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    args.steps = [int(x) for x in args.ramp.split(",") if x.strip()] or [args.workers]
    if not args.clips:
        # Offered cycles per step: a worker is active for (duration - join_over / 2) on average,
        # one cycle per mean think time; 3 assignments fill a clip (3 candidates x quota 3, one
        # candidate slot each per assignment). The largest step sets the size, x 1.5.
        active = args.duration - args.join_over / 2
        per_worker = (1 - args.fast_share) / (sum(args.think) / 2) + args.fast_share / (
            sum(args.fast_think) / 2
        )
        offered = max(args.steps) * active * per_worker
        args.clips = int(offered / args.judgments * 1.5) + 100
    log(f"{args.steps} workers, {args.clips} clips")
    report = run(args)
    report["command"] = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    postgres = subprocess.run(
        [str(lw.postgres_bin() / "postgres"), "--version"], capture_output=True, text=True
    ).stdout.strip()
    path = write_raw("crowd_scale", report, postgres_version=f"{postgres} (private cluster)")
    if args.output:
        args.output.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    for step in report["steps"]:
        sys.stdout.write(step_line(step) + "\n")
    sys.stdout.write(json.dumps(report["targets"]) + f"\nraw: {path}\n")


if __name__ == "__main__":
    main()
