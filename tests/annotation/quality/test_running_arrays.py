"""The running statistics' per-worker arrays: `running._grouped` (each worker's values, sorted)
gives what splitting `np.lexsort` order gives, on both of its paths (one integer key, or a sort by
value then by group), and `copy_arrays_to_temp_table` (how `running_store.running_states_write`
sends them) stores exactly the arrays given, empty ones included."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection, transaction

from annotation.crowd.services.columns import copy_arrays_to_temp_table
from annotation.quality.running import _grouped


def _lexsorted(group: np.ndarray, values: np.ndarray, groups: int) -> list[np.ndarray]:
    order = np.lexsort((values, group))
    bounds = np.searchsorted(group[order], np.arange(groups + 1))
    return [values[order][bounds[i] : bounds[i + 1]] for i in range(groups)]


@pytest.mark.parametrize(
    "make",
    [
        lambda rng, n: rng.integers(-5, 70_000, n),  # one integer key
        lambda rng, n: rng.integers(0, 2**60, n),  # too wide a span for one key
        lambda rng, n: rng.random(n) * 3,  # floats
        lambda rng, n: np.round(rng.random(n), 1),  # floats with ties
    ],
)
def test_grouped_matches_lexsort(make) -> None:
    rng = np.random.default_rng(7)
    for size, groups in ((0, 3), (1, 1), (500, 7), (3000, 40)):
        group = rng.integers(0, groups, size)
        values = make(rng, size)
        got = _grouped(group, values, groups)
        assert len(got) == groups
        for mine, theirs in zip(got, _lexsorted(group, values, groups), strict=True):
            assert mine.dtype == values.dtype
            np.testing.assert_array_equal(mine, theirs)


@pytest.mark.django_db(transaction=True)
def test_copy_arrays_round_trip() -> None:
    ids = np.array([11, 12, 13, 14], dtype=np.int64)
    ints = [[1, 2, 3], [], [2**40, -7], [0]]
    small = [[], [5], [-(2**31) + 1, 2**31 - 1], []]
    reals = [[0.1, 1 / 3], [2.5e-300], [], [float("inf"), -0.0]]

    def flat(rows: list[list], dtype: type) -> tuple[np.ndarray, np.ndarray]:
        values: np.ndarray = np.array([v for row in rows for v in row], dtype=dtype)
        return values, np.array([len(row) for row in rows], dtype=np.int64)

    with transaction.atomic():
        written = copy_arrays_to_temp_table(
            "t_arrays",
            ("key", ids),
            [
                ("a", "int8", *flat(ints, np.int64)),
                ("b", "int4", *flat(small, np.int64)),
                ("c", "float8", *flat(reals, np.float64)),
            ],
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT key, a, b, c, cardinality(a) FROM t_arrays ORDER BY key")
            rows = cursor.fetchall()
    assert written == 4
    assert [row[0] for row in rows] == ids.tolist()
    assert [row[1] for row in rows] == ints
    assert [row[2] for row in rows] == small
    assert [row[3] for row in rows] == reals
    assert [row[4] for row in rows] == [3, 0, 2, 1]


@pytest.mark.django_db(transaction=True)
def test_copy_arrays_refuses_what_it_cannot_store() -> None:
    with transaction.atomic():
        with pytest.raises(ValueError, match="integer array"):
            copy_arrays_to_temp_table(
                "t_arrays",
                ("key", np.array([1])),
                [("b", "int4", np.array([2**31]), np.array([1]))],
            )
        with pytest.raises(ValueError, match="lengths"):
            copy_arrays_to_temp_table(
                "t_arrays", ("key", np.array([1])), [("a", "int8", np.arange(3), np.array([2]))]
            )
