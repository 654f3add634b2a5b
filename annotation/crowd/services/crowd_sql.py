"""Small helpers for the hand-written SQL of the worker hot path (`next`, `submit`, auth).

Why SQL here: building an ORM query costs 1–4 ms of CPU per statement (compiling joins,
select_related, Exists), which was most of a next → submit cycle; a prepared SQL string costs a
tenth of that. Steps that follow each other are folded into one statement with data-modifying
CTEs, which halves the round trips of a cycle, and the statements of the hot path are prepared
once per database session (`PREPARE` / `EXECUTE`, see `_execute`): PostgreSQL then skips parsing
and planning them on every request, which was most of its CPU per statement (EXPLAIN ANALYZE of
the claim query: 0.24 ms planning, 0.07 ms execution).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings
from django.db import connection
from django.db.models import Field, Model

from annotation.models import (
    Assignment,
    AssignmentItem,
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    Participation,
)
from datasets_app.models import CandidateCaption, Clip, ReferenceCaption

# Table names, from the models (so a db_table change cannot silently break the SQL).
T_ASSIGNMENT = Assignment._meta.db_table
T_ITEM = AssignmentItem._meta.db_table
T_CAMPAIGN = Campaign._meta.db_table
T_CANDIDATE = CampaignCandidate._meta.db_table
T_CAMPAIGN_CLIP = CampaignClip._meta.db_table
T_JUDGMENT = Judgment._meta.db_table
T_PARTICIPATION = Participation._meta.db_table
T_CAPTION = CandidateCaption._meta.db_table
T_CLIP = Clip._meta.db_table
T_REFERENCE = ReferenceCaption._meta.db_table


def db_json(model: type[Model], field_name: str, value: Any) -> Any:
    field = model._meta.get_field(field_name)
    assert isinstance(field, Field)
    return field.get_db_prep_save(value, connection)


def py_json(value: Any) -> Any:
    """A JSON value read by a raw cursor: Django leaves jsonb as text for its fields to parse."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def fetchone(
    sql: str, params: list[Any] | tuple[Any, ...], *, prepared: bool = False
) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        _execute(cursor, sql, params, prepared=prepared)
        return cursor.fetchone()


def fetchall(
    sql: str, params: list[Any] | tuple[Any, ...], *, prepared: bool = False
) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        _execute(cursor, sql, params, prepared=prepared)
        return list(cursor.fetchall())


def execute(sql: str, params: list[Any] | tuple[Any, ...], *, prepared: bool = False) -> int:
    with connection.cursor() as cursor:
        _execute(cursor, sql, params, prepared=prepared)
        return int(cursor.rowcount)


# --- Prepared statements ------------------------------------------------------------------------


@dataclass
class _SessionStatements:
    """The statements prepared on one database session (one psycopg2 connection)."""

    session: Any
    names: dict[str, str] = dataclasses.field(default_factory=dict)
    attempts: int = 0


@functools.cache
def _numbered(sql: str) -> tuple[str, int]:
    """`sql` with its `%s` placeholders numbered `$1, $2, ...` (PREPARE's syntax), and how many."""
    parts = sql.split("%s")
    if any("%" in part for part in parts):
        raise ValueError("a prepared statement may hold no % other than its placeholders")
    return "".join(
        part + (f"${index}" if index < len(parts) else "")
        for index, part in enumerate(parts, start=1)
    ), len(parts) - 1


def _execute(cursor: Any, sql: str, params: Any, *, prepared: bool) -> None:
    """Run `sql`; with `prepared` as a statement prepared once per session.

    The first use on a session sends `PREPARE name AS ...; EXECUTE name (...)` in one round trip
    and remembers the name only once that succeeded. PREPARE is not undone by a rollback, so a
    failed first use (say a unique violation of the EXECUTE part) may or may not have left the
    statement behind: the next attempt prepares it under a fresh name instead of guessing. A new
    connection (CONN_MAX_AGE, a reconnect after a failure) starts with nothing prepared.
    PostgreSQL re-plans a prepared statement by itself when a table it reads changes (ANALYZE,
    ALTER); a migration that changes the columns a statement returns makes it fail until the web
    processes reconnect, as it would with any server-side prepared statement.
    `LEPUS_DB_PREPARED_STATEMENTS` off (behind a pooler in transaction mode) runs every statement
    as it is.
    """
    if not (prepared and settings.LEPUS_DB_PREPARED_STATEMENTS):
        cursor.execute(sql, params)
        return
    session = connection.connection
    statements: _SessionStatements | None = getattr(connection, "_lepus_prepared", None)
    if statements is None or statements.session is not session:
        statements = _SessionStatements(session=session)
        connection._lepus_prepared = statements  # type: ignore[attr-defined]
    arguments = f" ({', '.join(['%s'] * len(params))})" if params else ""
    name = statements.names.get(sql)
    if name is not None:
        cursor.execute(f"EXECUTE {name}{arguments}", params)
        return
    text, count = _numbered(sql)
    if count != len(params):
        raise ValueError(f"{count} placeholders, {len(params)} parameters")
    statements.attempts += 1
    name = f"lepus_hot_{statements.attempts}"
    cursor.execute(f"PREPARE {name} AS {text}; EXECUTE {name}{arguments}", params)
    statements.names[sql] = name


def instance(model: type[Model], values: dict[str, Any]) -> Any:
    """A model instance from column values (other fields load lazily if ever touched)."""
    names = [field.attname for field in model._meta.concrete_fields if field.attname in values]
    return model.from_db(connection.alias, names, [values[name] for name in names])


# --- Rows inserted by hand-written SQL ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JudgmentRow:
    """A judgment as the submit path inserts it. The field names are the model's column names, so
    the INSERT's column list, its type casts and each row's values all come from this one type
    (`row_columns`, `row_casts`, `row_values`) and cannot drift apart. Values are ready for the
    database (`db_json` for JSON); columns not listed take NULL."""

    model: ClassVar[type[Model]] = Judgment

    campaign_id: int
    campaign_candidate_id: int
    participation_id: int
    assignment_id: int
    values: Any
    reason: str
    source: str
    server_ms: int
    client_active_ms: int | None
    client_video_played_ms: int | None
    created_at: Any
    is_excluded: bool
    excluded_by: str
    exclusion_reason: str
    exclusion_detail: Any


def _row_fields(row_type: type[Any]) -> list[Field[Any, Any]]:
    model = row_type.model
    fields = []
    for row_field in dataclasses.fields(row_type):
        model_field = model._meta.get_field(row_field.name)
        if not isinstance(model_field, Field) or model_field.attname != row_field.name:
            raise TypeError(
                f"{row_type.__name__}.{row_field.name} is not a column of {model.__name__}"
            )
        fields.append(model_field)
    return fields


@functools.cache
def row_columns(row_type: type[Any]) -> str:
    """The quoted column list of `row_type`'s table, in the row type's field order."""
    return ", ".join(
        connection.ops.quote_name(str(field.column)) for field in _row_fields(row_type)
    )


@functools.cache
def row_placeholders(row_type: type[Any]) -> str:
    """`(%s, %s, ...)`: one row of parameters."""
    return "(" + ", ".join(["%s"] * len(dataclasses.fields(row_type))) + ")"


@functools.cache
def row_casts(row_type: type[Any]) -> str:
    """`(%s::bigint, %s::jsonb, ...)`: one row of parameters typed as their columns, for rows
    selected from a VALUES list, whose untyped literals would not convert."""
    casts = []
    for field in _row_fields(row_type):
        column_type = field.db_type(connection) or "text"
        casts.append("%s::" + re.sub(r"\(\d+\)$", "", column_type))
    return "(" + ", ".join(casts) + ")"


def row_values(row: Any) -> list[Any]:
    """The row's values in column order."""
    return [getattr(row, field.name) for field in dataclasses.fields(row)]
