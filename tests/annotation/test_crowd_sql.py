"""The submit path's judgment rows: the INSERT's columns, its casts and each row's values come from
one row type (`crowd_sql.JudgmentRow`), whose fields are the model's columns."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import connection

from annotation.models import Judgment
from annotation.services import crowd_sql, submission


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
    if connection.vendor == "postgresql":
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
