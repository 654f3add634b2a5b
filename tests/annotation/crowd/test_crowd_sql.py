"""The submit path's judgment rows: the INSERT's columns, its casts and each row's values come from
one row type (`crowd_sql.JudgmentRow`), whose fields are the model's columns."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import connection

from annotation.crowd.services import crowd_sql, submission
from annotation.models import Judgment


def test_the_row_type_names_judgment_columns_and_leaves_out_only_nullable_ones():
    names = [field.name for field in dataclasses.fields(crowd_sql.JudgmentRow)]
    columns = {field.attname: field for field in Judgment._meta.concrete_fields}
    assert set(names) <= set(columns)
    left_out = set(columns) - set(names) - {"id"}
    assert left_out and all(columns[name].null for name in left_out)
    assert (
        ", ".join(connection.ops.quote_name(columns[name].column) for name in names)
        == submission._JUDGMENT_COLUMNS
    )


def test_placeholders_casts_and_values_follow_the_row_types_fields():
    count = len(dataclasses.fields(crowd_sql.JudgmentRow))
    assert crowd_sql.row_placeholders(crowd_sql.JudgmentRow).count("%s") == count
    casts = crowd_sql.row_casts(crowd_sql.JudgmentRow)
    assert casts.count("%s::") == count
    assert casts.startswith("(%s::bigint, %s::bigint, %s::bigint, %s::bigint, %s::jsonb,")
    assert "%s::varchar," in casts and "(" not in casts[1:]
    values = {
        field.name: index for index, field in enumerate(dataclasses.fields(crowd_sql.JudgmentRow))
    }
    row = crowd_sql.JudgmentRow(**values)
    assert crowd_sql.row_values(row) == list(range(count))


def test_a_row_type_with_a_field_that_is_no_column_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Wrong:
        model = Judgment
        campaign_id: int
        campaign: int  # the relation, not its column

    with pytest.raises(TypeError, match="is not a column"):
        crowd_sql.row_columns(Wrong)


# --- prepared statements (PostgreSQL) -----------------------------------------------------------


def _prepared_names() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'lepus_hot_%%'")
        return sorted(name for (name,) in cursor.fetchall())


def test_placeholders_are_numbered_for_prepare_and_a_stray_percent_is_refused():
    assert crowd_sql._numbered("SELECT %s + %s WHERE a = %s") == ("SELECT $1 + $2 WHERE a = $3", 3)
    assert crowd_sql._numbered("SELECT 1") == ("SELECT 1", 0)
    with pytest.raises(ValueError, match="no %"):
        crowd_sql._numbered("SELECT %s WHERE b LIKE 'x%'")


@pytest.mark.django_db
def test_a_statement_is_prepared_once_per_session_and_then_executed_by_name():
    statement = "SELECT %s::integer + %s::integer"
    before = _prepared_names()
    assert crowd_sql.fetchone(statement, [1, 2], prepared=True) == (3,)
    names = _prepared_names()
    assert len(names) == len(before) + 1
    assert crowd_sql.fetchone(statement, [5, 6], prepared=True) == (11,)
    assert crowd_sql.fetchall(statement, [1, 1], prepared=True) == [(2,)]
    assert _prepared_names() == names  # executed by name, not prepared again
    # Without `prepared` the same text is sent as it is.
    assert crowd_sql.fetchone(statement, [2, 2]) == (4,)
    assert _prepared_names() == names


@pytest.mark.django_db
def test_behind_a_transaction_pooler_nothing_is_prepared(settings):
    settings.LEPUS_DB_PREPARED_STATEMENTS = False
    statement = "SELECT %s::integer * %s::integer"
    before = _prepared_names()
    assert crowd_sql.fetchone(statement, [3, 4], prepared=True) == (12,)
    assert crowd_sql.fetchall(statement, [2, 5], prepared=True) == [(10,)]
    assert _prepared_names() == before


@pytest.mark.django_db(transaction=True)
def test_a_failed_first_use_prepares_again_under_a_fresh_name_and_a_new_session_starts_empty():
    from django.db import DataError, transaction

    statement = "SELECT 10 / %s::integer"
    connection.close()  # a session of its own: nothing prepared yet
    with pytest.raises(DataError), transaction.atomic():
        crowd_sql.fetchone(statement, [0], prepared=True)  # PREPARE ran, EXECUTE failed
    assert crowd_sql.fetchone(statement, [5], prepared=True) == (2,)
    assert crowd_sql.fetchone(statement, [2], prepared=True) == (5,)
    assert len(_prepared_names()) == 2  # the uncertain first name is never reused

    connection.close()
    assert crowd_sql.fetchone(statement, [10], prepared=True) == (1,)
    assert len(_prepared_names()) == 1  # the new session prepared it once
