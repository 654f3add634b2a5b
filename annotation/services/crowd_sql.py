"""Small helpers for the hand-written SQL of the worker hot path (`next`, `submit`, auth).

Why SQL here: building an ORM query costs 1–4 ms of CPU per statement (compiling joins,
select_related, Exists), which was most of a next → submit cycle; a prepared SQL string costs a
tenth of that. The statements are plain SQL that PostgreSQL and SQLite (3.35+, the demo) both run;
only the row-locking clauses differ and come from `lock_clause`. On PostgreSQL, steps that
follow each other are folded into one statement with data-modifying CTEs (`combined_statements`),
which halves the round trips of a cycle.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.utils.dateparse import parse_datetime

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


# Tests flip this to run the portable statements (the SQLite path) on PostgreSQL too.
FORCE_PORTABLE = False


def combined_statements() -> bool:
    """Whether several hot-path steps may run as one statement with data-modifying CTEs
    (PostgreSQL); otherwise each step is its own portable statement (SQLite)."""
    return connection.vendor == "postgresql" and not FORCE_PORTABLE


def lock_clause(*, of: str | None = None, skip_locked: bool = False) -> str:
    """`FOR UPDATE [OF alias] [SKIP LOCKED]` where the database has row locks (not SQLite, whose
    write transactions are serialised as a whole)."""
    features = connection.features
    if not features.has_select_for_update:
        return ""
    clause = " FOR UPDATE"
    if of and features.has_select_for_update_of:
        clause += f" OF {of}"
    if skip_locked and features.has_select_for_update_skip_locked:
        clause += " SKIP LOCKED"
    return clause


def db_datetime(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def py_datetime(value: Any) -> datetime:
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a datetime: {value!r}")
        value = parsed
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def db_json(model: type[Model], field_name: str, value: Any) -> Any:
    field = model._meta.get_field(field_name)
    assert isinstance(field, Field)
    return field.get_db_prep_save(value, connection)


def py_json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def fetchone(sql: str, params: list[Any] | tuple[Any, ...]) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetchall(sql: str, params: list[Any] | tuple[Any, ...]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def execute(sql: str, params: list[Any] | tuple[Any, ...]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def instance(model: type[Model], values: dict[str, Any]) -> Any:
    """A model instance from column values (other fields load lazily if ever touched)."""
    names = [field.attname for field in model._meta.concrete_fields if field.attname in values]
    return model.from_db(connection.alias, names, [values[name] for name in names])
