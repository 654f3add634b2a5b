"""Which database the code talks to, asked in one place."""

from __future__ import annotations

from django.db import connection as default_connection
from django.db.backends.base.base import BaseDatabaseWrapper


def is_postgresql(connection: BaseDatabaseWrapper | None = None) -> bool:
    """Whether `connection` (the default one when not given) is PostgreSQL: the production
    database, where COPY, advisory locks, data-modifying CTEs and ANALYZE are used. Anything else
    is the SQLite demo, which takes the portable path."""
    return (connection or default_connection).vendor == "postgresql"
