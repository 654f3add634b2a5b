"""A Celery worker keeps its database connection between tasks (CONN_MAX_AGE), as a web process
does between requests: Celery's own Django fix-up, run here in-process with the project's Celery
configuration, would otherwise close it around every task (a new PostgreSQL backend per quality
pass). No worker process is started: the fix-up's task hooks are called as the worker calls them."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from config.celery import app, database_connections_refresh


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def _task_runs(fixup: DjangoWorkerFixup) -> None:
    """What a worker does around one task: Celery's hooks, then the project's."""
    sender = SimpleNamespace(request=SimpleNamespace(is_eager=False))
    fixup.on_task_prerun(sender)
    database_connections_refresh()
    _backend_pid()
    fixup.on_task_postrun(sender)
    database_connections_refresh()


@pytest.mark.django_db(transaction=True)
def test_the_database_connection_outlives_a_task_until_conn_max_age() -> None:
    fixup = DjangoWorkerFixup(app)
    # A connection of its own: one this test process opened earlier may be past CONN_MAX_AGE
    # already (a long suite), and then the first task rightly replaces it.
    connection.close()
    first = _backend_pid()
    for _ in range(3):
        _task_runs(fixup)
    assert connection.connection is not None
    assert _backend_pid() == first
    # Past CONN_MAX_AGE the next task gets a new connection.
    connection.close_at = time.monotonic() - 1
    _task_runs(fixup)
    assert _backend_pid() != first
