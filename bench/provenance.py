"""Benchmark provenance: every benchmark writes its raw figures through `write_raw`.

    from provenance import write_raw        # bench/ is on sys.path when a bench script runs
    path = write_raw("qc_scale", report, database_url=url)

One JSON file per invocation under `bench/results/` (or `LEPUS_BENCH_RESULTS`), named
`<name>_<UTC time>_<short commit>[-dirty].json`, holding: the git commit and whether the tree
was dirty (tracked files changed; untracked files are listed apart), the exact command line, the
UTC date, the machine (CPU model, cores, memory, load average when this module was imported and
when the file was written; GPU name and driver when torch sees one), the versions of Python,
PostgreSQL (the server's `server_version` when a database URL or DSN is given), libpq, torch,
transformers and Django (installed distributions, read without importing them; the pins of
requirements.txt beside them), the input files with their sha256 (`inputs=`, see
`input_checksums`), and every figure the benchmark passed in, unchanged.

Standard library only (psycopg2 and torch are used when present): no Django, so it works from the
scripts' parent processes, which never set Django up.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
SCHEMA = "lepus-bench-raw/1"
DISTRIBUTIONS = ("torch", "transformers", "Django", "psycopg2-binary", "numpy", "pyarrow")


def _load_average() -> list[float]:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return []


# Taken when a benchmark imports this module, i.e. before it starts measuring.
STARTED = {"utc": datetime.now(UTC).isoformat(timespec="seconds"), "load_average": _load_average()}
_STARTED_MONOTONIC = time.monotonic()


def _git(*arguments: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *arguments],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.rstrip("\n")  # not strip(): porcelain lines start with a space


def git_state() -> dict[str, Any]:
    commit = (_git("rev-parse", "HEAD") or "").strip() or None
    tracked = _git("status", "--porcelain", "--untracked-files=no")
    untracked = _git("status", "--porcelain", "--untracked-files=normal")
    changed = [line[3:] for line in (tracked or "").splitlines()]
    new = [line[3:] for line in (untracked or "").splitlines() if line.startswith("??")]
    return {
        "commit": commit,
        "branch": _git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(changed) if tracked is not None else None,
        "changed_files": changed[:50],
        "untracked_files": new[:50],
        "repository": str(REPO_ROOT),
    }


def _read_first(path: str, prefix: str) -> str:
    with contextlib.suppress(OSError), open(path) as handle:
        for line in handle:
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    return ""


def _gpu() -> dict[str, Any] | None:
    """GPU name and driver when torch sees one. torch is imported only where it may find a GPU
    (it is already imported, or an NVIDIA driver is loaded): importing it costs seconds."""
    driver_file = Path("/proc/driver/nvidia/version")
    if "torch" not in sys.modules and not driver_file.exists():
        return None
    try:
        import torch
    except Exception:  # an absent or broken torch: no GPU to report
        return None
    if not torch.cuda.is_available():
        return None
    driver = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.splitlines()[0]
    if not driver and driver_file.exists():
        match = re.search(r"Kernel Module\s+(\S+)", driver_file.read_text())
        driver = match.group(1) if match else ""
    return {
        "count": torch.cuda.device_count(),
        "names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "driver": driver,
        "cuda": torch.version.cuda,
    }


class MissingInput(SystemExit):
    """A benchmark's input file is absent: the benchmark stops (it never measures a stand-in)."""


def input_checksums(**paths: str | os.PathLike[str] | None) -> dict[str, Any]:
    """{name: {"path", "sha256", "bytes"}} of each input file a figure depends on (the path
    relative to the repository when it lies inside it). A missing file stops the benchmark with
    `MissingInput`; ``None`` records an input the run was asked to do without (e.g. a
    ``--synthetic-...`` flag), and the raw file then says so."""
    import hashlib

    out: dict[str, Any] = {}
    for name, given in paths.items():
        if given is None:
            out[name] = None
            continue
        path = Path(given)
        if not path.is_file():
            raise MissingInput(f"missing input: {path} ({name}); the benchmark stops")
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        resolved = path.resolve()
        shown = (
            resolved.relative_to(REPO_ROOT).as_posix()
            if resolved.is_relative_to(REPO_ROOT)
            else str(resolved)
        )
        out[name] = {"path": shown, "sha256": digest.hexdigest(), "bytes": path.stat().st_size}
    return out


def machine() -> dict[str, Any]:
    memory_kib = _read_first("/proc/meminfo", "MemTotal:").split()
    return {
        "hostname": socket.gethostname(),
        "cpu_model": _read_first("/proc/cpuinfo", "model name") or platform.processor(),
        "cores": os.cpu_count(),
        "memory_gib": round(int(memory_kib[0]) / 1024 / 1024, 1) if memory_kib else None,
        "kernel": platform.release(),
        "load_average_at_start": STARTED["load_average"],
        "load_average_at_end": _load_average(),
        "gpu": _gpu(),
    }


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for name in ("requirements.txt", "requirements-dev.txt"):
        with contextlib.suppress(OSError):
            for line in (REPO_ROOT / name).read_text().splitlines():
                match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s#;]+)", line.strip())
                if match:
                    pins[match.group(1).lower()] = match.group(2)
    return pins


def postgres_server_version(database: str) -> str | None:
    """`server_version` of the server behind a URL (postgres://...) or a libpq DSN."""
    try:
        import psycopg2
    except ImportError:
        return None
    try:
        connection = psycopg2.connect(database, connect_timeout=10)
    except Exception as error:  # a stopped private cluster, a wrong URL: say so, do not fail
        return f"unavailable ({type(error).__name__})"
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            return str(cursor.fetchone()[0])
    finally:
        connection.close()


def versions(*, database: str | None, postgres_version: str | None) -> dict[str, Any]:
    installed: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            installed[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed[name] = None
    pins = _pins()
    libpq = None
    with contextlib.suppress(ImportError):
        import psycopg2.extensions

        libpq = psycopg2.extensions.libpq_version()
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "postgresql": postgres_version or (postgres_server_version(database) if database else None),
        "libpq": libpq,
        "installed": installed,
        "requirements_pins": {name: pins.get(name.lower()) for name in DISTRIBUTIONS},
    }


def raw_record(
    name: str,
    figures: Any,
    *,
    database: str | None = None,
    postgres_version: str | None = None,
    command: list[str] | None = None,
    notes: str | None = None,
    inputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The record `write_raw` writes (for a benchmark that also keeps a partial file while it
    runs, so that a run stopped by a time limit still leaves its figures with their provenance)."""
    finished = datetime.now(UTC)
    git = git_state()
    argv = command if command is not None else [sys.executable, *sys.argv]
    return {
        "schema": SCHEMA,
        "benchmark": name,
        "date_utc": finished.isoformat(timespec="seconds"),
        "started_utc": STARTED["utc"],
        "elapsed_seconds": round(time.monotonic() - _STARTED_MONOTONIC, 1),
        "command": shlex.join(argv),
        "cwd": os.getcwd(),
        "git": git,
        "machine": machine(),
        "versions": versions(database=database, postgres_version=postgres_version),
        "notes": notes,
        "inputs": inputs,
        "figures": figures,
    }


def median_min_max(values: list[float], digits: int = 3) -> dict[str, Any]:
    """The headline form of a figure measured in several runs: median, min, max and the runs."""
    import statistics

    if not values:
        return {"median": None, "min": None, "max": None, "runs": 0}
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "runs": len(values),
    }


def summarise_runs(runs: list[dict[str, Any]], digits: int = 3) -> dict[str, Any]:
    """`median_min_max` of every numeric field (bools aside) that every run reports."""
    if not runs:
        return {}
    keys = [
        key
        for key, value in runs[0].items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]
    return {
        key: median_min_max([float(run[key]) for run in runs], digits)
        for key in keys
        if all(
            isinstance(run.get(key), int | float) and not isinstance(run.get(key), bool)
            for run in runs
        )
    }


def cpu_seconds_of(pid: int) -> float:
    """user + system CPU seconds of a process of this machine (e.g. a PostgreSQL backend, whose
    pid `SELECT pg_backend_pid()` gives when the server runs here); NaN when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_raw(
    name: str,
    figures: Any,
    *,
    database: str | None = None,
    postgres_version: str | None = None,
    command: list[str] | None = None,
    notes: str | None = None,
    directory: Path | None = None,
    inputs: dict[str, Any] | None = None,
) -> Path:
    """Write one raw result file and return its path (also printed on stderr).

    `figures` is everything the benchmark measured, stored as given (it must be JSON-serialisable;
    anything else is stored as its str()). `database` is a PostgreSQL URL or libpq DSN whose
    server_version is recorded; `postgres_version` overrides it (e.g. a private cluster already
    stopped). `command` defaults to this process's exact command line. `inputs` is what
    `input_checksums` returned for the files the figures depend on.
    """
    record = raw_record(
        name,
        figures,
        database=database,
        postgres_version=postgres_version,
        command=command,
        notes=notes,
        inputs=inputs,
    )
    finished = datetime.fromisoformat(record["date_utc"])
    git = record["git"]
    folder = directory or Path(os.environ.get("LEPUS_BENCH_RESULTS", RESULTS_DIR))
    folder.mkdir(parents=True, exist_ok=True)
    commit = (git["commit"] or "nogit")[:7] + ("-dirty" if git["dirty"] else "")
    stem = f"{name}_{finished.strftime('%Y-%m-%dT%H%M%SZ')}_{commit}"
    path = folder / f"{stem}.json"
    suffix = 1
    while path.exists():
        suffix += 1
        path = folder / f"{stem}_{suffix}.json"
    path.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    print(f"raw result: {path}", file=sys.stderr)
    return path
