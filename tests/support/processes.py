"""Real processes for tests: a Celery worker and an S3-speaking server, both on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

from tests.support.paused_worker import PAUSES_VARIABLE
from tests.support.plain import REPO_ROOT
from tests.support.plain import free_port as free_port  # re-exported for the tests that use it


def test_database_url() -> str:
    """The URL of the database the tests run on (the test_ database pytest-django created)."""
    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


def process_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process that shares the test database, broker and storage."""
    env = dict(os.environ)
    env["DATABASE_URL"] = test_database_url()
    env["DJANGO_SETTINGS_MODULE"] = "config.test_settings"
    env["LEPUS_VAR_DIR"] = str(settings.VAR_DIR)
    env["LEPUS_MEDIA_ROOT"] = str(settings.MEDIA_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    if settings.LEPUS_S3_BUCKET:
        env["LEPUS_S3_BUCKET"] = settings.LEPUS_S3_BUCKET
        env["LEPUS_S3_ENDPOINT_URL"] = settings.LEPUS_S3_ENDPOINT_URL or ""
    if extra:
        env.update(extra)
    return env


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.1,
    message: str | Callable[[], str] = "condition",
) -> None:
    """Poll `predicate` until it holds; on timeout raise with `message` (a callable is called
    then, so it can describe the state at the end of the wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    described = message() if callable(message) else message
    raise TimeoutError(f"timed out after {timeout}s waiting for {described}")


class CeleryWorker:
    """A `celery -A config worker` child process; `kill()` sends SIGKILL like a crashed machine.

    `pauses` (point -> seconds; tests/support/paused_worker.py lists the points) make its jobs
    stop for a while at those points, so that a test can kill it mid-job; the same goes for a
    `LEPUS_TEST_PAUSES` already in the environment (a fixture's monkeypatch)."""

    def __init__(
        self,
        *,
        queues: str = "default,training",
        extra_env: dict[str, str] | None = None,
        pauses: dict[str, float] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.queues = queues
        self.extra_env = dict(extra_env or {})
        if pauses:
            self.extra_env[PAUSES_VARIABLE] = json.dumps(pauses)
        self.log_path = (
            log_path or Path(settings.VAR_DIR) / f"celery-{os.getpid()}-{time.time_ns()}.log"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, ready_timeout: float = 60.0) -> CeleryWorker:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
        hostname = f"test-{os.getpid()}-{time.time_ns()}@%h"
        env = process_environment(self.extra_env)
        entry = "tests.support.paused_worker" if env.get(PAUSES_VARIABLE) else "celery"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                entry,
                "-A",
                "config",
                "worker",
                "-Q",
                self.queues,
                "--pool=solo",
                "--concurrency=1",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                hostname,
                "--loglevel=INFO",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(
            lambda: b"ready." in self.log_path.read_bytes() or self.process.poll() is not None,
            timeout=ready_timeout,
            message="celery worker ready",
        )
        if self.process.poll() is not None:
            raise RuntimeError(f"celery worker exited early:\n{self.log()}")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def celery_worker(**kwargs: object) -> Iterator[CeleryWorker]:
    worker = CeleryWorker(**kwargs).start()  # type: ignore[arg-type]
    try:
        yield worker
    finally:
        worker.stop()


def purge_broker() -> None:
    """Drop messages left in the test broker by earlier tests."""
    from config.celery import app

    with app.connection_for_write() as conn:
        for queue in ("default", "training"):
            with contextlib.suppress(Exception):  # the queue may not exist yet
                conn.default_channel.queue_purge(queue)
