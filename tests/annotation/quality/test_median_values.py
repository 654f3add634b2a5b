"""The running statistics' sorted median values, moved in PostgreSQL (`lepus_sorted_merge`,
migration 0020; `running_store.median_values_read` / `median_values_write`): after random
removals and additions, with repeated values, the stored arrays equal Python's sorted multiset
arithmetic, and the middle values read equal those of that multiset."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from django.db import connection

from annotation.models import WorkerQCStats
from annotation.quality.running import empty_state, median_stand_in
from annotation.quality.running_store import median_values_read, median_values_write
from tests.annotation.quality.factories import quality_crowd_campaign, quality_worker

pytestmark = pytest.mark.django_db


def _expected(stored: list[float], removed: list[float], added: list[float]) -> list[float]:
    left = Counter(stored)
    left.subtract(Counter(removed))
    assert min(left.values(), default=0) >= 0
    return sorted((left + Counter(added)).elements())


def _random_change(rng: random.Random, stored: list[float], pool: list[float]) -> tuple:
    """Some of `stored` out (repeats included), some values of `pool` in, and values that are
    taken out and put back (as a pass does with the old judgments of a touched clip)."""
    taken = rng.sample(stored, k=min(len(stored), rng.randint(0, 7)))
    removed, back = taken[: len(taken) // 2], taken[len(taken) // 2 :]
    added = [rng.choice(pool) for _ in range(rng.randint(0, 5))]
    return removed + back, added + back


def test_sorted_merge_in_the_database_equals_the_multiset_arithmetic() -> None:
    rng = random.Random(29)
    with connection.cursor() as cursor:
        for cast, pool in (
            ("integer[]", [1, 2, 2, 3, 5, 8, 13]),
            ("double precision[]", [0.1, 0.5, 0.5, 1 / 3, 2.25]),
        ):
            stored: list = []
            for _ in range(60):
                removed, added = _random_change(rng, stored, pool)
                cursor.execute(
                    f"SELECT lepus_sorted_merge(%s::{cast}, %s::{cast}, %s::{cast})",
                    [stored, removed, added],
                )
                merged = cursor.fetchone()[0]
                expected = _expected(stored, removed, added)
                assert merged == expected
                stored = merged
        cursor.execute("SELECT lepus_sorted_merge(NULL::integer[], '{}', '{4,1}')")
        assert cursor.fetchone()[0] == [1, 4]
        with pytest.raises(Exception, match="not there"):
            cursor.execute("SELECT lepus_sorted_merge('{1,2}'::integer[], '{3}', '{}')")


def test_a_pass_moves_the_stored_values_and_reads_their_middle() -> None:
    rng = random.Random(38)
    campaign = quality_crowd_campaign(slug="medians")
    workers = [quality_worker(campaign, f"w{index}").pk for index in range(4)]
    for pid in workers:
        WorkerQCStats.objects.create(participation_id=pid)
    expected_timing = {pid: [] for pid in workers}
    expected_ratios = {pid: [] for pid in workers}
    for round_index in range(25):
        removed, added = empty_state(len(workers)), empty_state(len(workers))
        replace = [round_index == 0 or rng.random() < 0.1 for _ in workers]
        for row, pid in enumerate(workers):
            for name, expected, pool in (
                ("timing_ms", expected_timing, [900, 1500, 1500, 2200, 4000, 4000, 7300]),
                ("clip_ratios", expected_ratios, [0.25, 0.5, 0.5, 1.75, 2 / 3]),
            ):
                out, into = (
                    ([], sorted(rng.choice(pool) for _ in range(rng.randint(0, 6))))
                    if replace[row]
                    else _random_change(rng, expected[pid], pool)
                )
                getattr(removed, name)[row] = np.sort(np.asarray(out))
                getattr(added, name)[row] = np.sort(np.asarray(into))
                expected[pid] = (
                    sorted(into) if replace[row] else _expected(expected[pid], out, into)
                )
        if not any(replace):
            timing, ratios = median_values_read(workers, removed=removed, added=added)
            for row, pid in enumerate(workers):
                for values, found in (
                    (expected_timing[pid], timing[row]),
                    (expected_ratios[pid], ratios[row]),
                ):
                    count = len(values)
                    middle = (
                        median_stand_in(count, values[(count - 1) // 2], values[count // 2])
                        if count
                        else []
                    )
                    assert list(found) == middle
        median_values_write(workers, removed=removed, added=added, replace=replace)
        for stats in WorkerQCStats.objects.filter(participation_id__in=workers):
            assert stats.running_timing_ms == expected_timing[stats.participation_id]
            assert stats.running_clip_ratios == expected_ratios[stats.participation_id]
