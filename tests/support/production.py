"""A production-mode Lepus on loopback for tests that replay a finding against the real server:
gunicorn (gthread, two processes of four threads) with the production settings module
(`config.settings`, DEBUG off), the test database, a private Redis as its cache, and, where a test
needs one, a Celery worker under the same settings on the suite's broker. Both share the test
process's storage (`process_environment`).

tests/hardening/test_crowd_integrity.py starts the same gunicorn in its own fixture.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.support.processes import (
    REPO_ROOT,
    CeleryWorker,
    free_port,
    process_environment,
    wait_until,
)
from tests.support.services import PrivateRedis

PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "DJANGO_DEBUG": "false",
    "LEPUS_LOG_LEVEL": "WARNING",
}


class ProductionServer:
    def __init__(self, port: int, log_path: Path, redis: PrivateRedis) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.redis = redis

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def curator_session(self, username: str, password: str) -> requests.Session:
        """A browser-like login through the form; the session sends its CSRF token and Referer
        with every request, as the pages' own scripts do."""
        session = requests.Session()
        session.get(f"{self.url}/accounts/login/", timeout=60).raise_for_status()
        response = session.post(
            f"{self.url}/accounts/login/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": session.cookies["csrftoken"],
            },
            allow_redirects=False,
            timeout=60,
        )
        assert response.status_code == 302, response.text[:2000]
        session.headers["X-CSRFToken"] = session.cookies["csrftoken"]
        session.headers["Referer"] = self.url
        return session

    def assert_no_server_error(self) -> None:
        log = self.log()
        assert "Traceback" not in log, log[-3000:]


@contextmanager
def production_server(
    *, log_dir: Path, extra_env: dict[str, str] | None = None
) -> Iterator[ProductionServer]:
    """gunicorn with `config.settings` and DEBUG off, answering on a free loopback port."""
    redis = PrivateRedis().start()
    port = free_port()
    log_path = log_dir / "gunicorn.log"
    env = process_environment({**PRODUCTION_ENV, "REDIS_URL": redis.url, **(extra_env or {})})
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--worker-class",
            "gthread",
            "--threads",
            "4",
            "--timeout",
            "120",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    running = ProductionServer(port, log_path, redis)

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{running.log()}")
        try:
            return requests.get(f"{running.url}/accounts/login/", timeout=20).status_code == 200
        except requests.RequestException:  # not listening yet, or still importing
            return False

    try:
        wait_until(answers, timeout=90, message="gunicorn to answer")
        yield running
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        log.close()
        redis.stop()


def production_worker(*, log_dir: Path, extra_env: dict[str, str] | None = None) -> CeleryWorker:
    """A Celery worker (solo pool: the job runs in this very process) under `config.settings`."""
    return CeleryWorker(
        queues="default",
        extra_env={**PRODUCTION_ENV, **(extra_env or {})},
        log_path=log_dir / "celery.log",
    ).start()


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM, KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for process {pid}")
