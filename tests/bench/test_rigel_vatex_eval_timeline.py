"""The scoring benchmark's batch timeline (issue 29, point 2): where a process's first run spends
the time a warm run does not."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import rigel_vatex_eval  # noqa: E402


def test_intervals_run_across_engine_runs_each_from_its_own_start():
    # two engine runs (the reference-free and the reference-based engine), marks in seconds
    # since each run's start
    timeline = rigel_vatex_eval.batch_timeline([[5.0, 6.0, 7.5], [1.0, 2.0]])
    assert timeline["intervals"] == [5.0, 1.0, 1.5, 1.0, 1.0]
    assert timeline["batches"] == 5
    assert timeline["first_intervals"] == [5.0, 1.0, 1.5, 1.0, 1.0]
    assert timeline["median_interval"] == 1.0
    # above the median: 4.0 (the first batch) + 0.5
    assert timeline["excess_over_median_seconds"] == pytest.approx(4.5)
    assert sum(timeline["excess_by_tenth"]) == pytest.approx(4.5)
    assert timeline["excess_by_tenth"][0] == pytest.approx(4.0)


def test_no_batches_no_timeline():
    assert rigel_vatex_eval.batch_timeline([]) == {}
    assert rigel_vatex_eval.batch_timeline([[]]) == {}


def test_the_counting_engine_records_each_batch_and_still_calls_the_callers_progress():
    class Engine:
        def run(self, examples, progress=None, **options):
            for done in range(1, len(examples) + 1):
                progress(done)
            return type("Output", (), {"stats": {"tokens": 3 * len(examples)}})()

    reported: list[int] = []
    marks: list[list[float]] = []
    totals: dict[str, int] = {}
    engine = rigel_vatex_eval.CountingEngine(Engine(), totals, marks=marks)
    engine.run([object()] * 4, progress=reported.append)
    engine.run([object()] * 2)
    assert reported == [1, 2, 3, 4]
    assert [len(run) for run in marks] == [4, 2]
    assert all(a <= b for run in marks for a, b in itertools.pairwise(run))
    assert totals["tokens"] == 18 and totals["samples"] == 6
