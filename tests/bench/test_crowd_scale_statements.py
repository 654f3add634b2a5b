"""bench/crowd_scale.py --pg-stat-statements: a private cluster started with the option loads
pg_stat_statements, and a step's record counts exactly the statements run since its reset, per
cycle, largest executor time first (a real PostgreSQL cluster, as the benchmark starts it)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import crowd_scale
import load_workers as lw


@contextlib.contextmanager
def private_cluster(settings: tuple[str, ...]) -> Iterator[lw.Bench]:
    """A cluster as crowd_scale.py starts one (under /tmp: the postgres user must reach it)."""
    root = Path(tempfile.mkdtemp(prefix="crowdscale-test-"))
    services = lw.Services()
    bench = lw.Bench(root=root, services=services, pg_socket_dir=root / "pg", pg_port=5432)
    try:
        lw.start_postgres(bench, settings=settings)
        lw.create_database(bench, "lepus")
        yield bench
    finally:
        for _name, process in reversed(list(services.processes)):
            services.stop(process, sig=signal.SIGINT)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[lw.Bench]:
    with private_cluster(crowd_scale.PG_STAT_STATEMENTS_SETTINGS) as bench:
        yield bench


def _run(bench: lw.Bench, query: str, times: int) -> None:
    for _ in range(times):
        lw.sql_rows(bench.pg_dsn("lepus"), query)


def test_a_step_records_the_statements_since_its_reset_per_cycle(cluster: lw.Bench) -> None:
    crowd_scale.statements_enable(cluster)
    _run(cluster, "SELECT 41", 7)  # before the reset: not counted
    crowd_scale.statements_reset(cluster)
    _run(cluster, "SELECT count(*) FROM generate_series(1, 200000)", 3)
    _run(cluster, "SELECT 42", 5)

    record = crowd_scale.statements_top(cluster, cycles=4)

    by_query = {row["query"]: row for row in record["top"]}
    series = by_query["SELECT count(*) FROM generate_series($1, $2)"]
    constant = by_query["SELECT $1"]
    assert (series["calls"], series["rows"]) == (3, 3)
    assert (constant["calls"], constant["rows"]) == (5, 5)
    assert series["calls_per_cycle"] == 0.75
    assert constant["calls_per_cycle"] == 1.25
    assert record["top"][0] is series  # the largest executor time first
    assert record["calls"] == sum(row["calls"] for row in record["top"])
    assert record["exec_ms_per_cycle"] == pytest.approx(
        record["exec_ms"] / 4, abs=0.05
    )  # exec_ms is rounded to 0.1
    assert series["exec_ms"] > constant["exec_ms"] >= 0


def test_statements_that_differ_by_the_length_of_an_in_list_are_one_family(
    cluster: lw.Bench,
) -> None:
    crowd_scale.statements_enable(cluster)
    crowd_scale.statements_reset(cluster)
    _run(cluster, "SELECT g FROM generate_series(1, 9) g WHERE g IN (1, 2)", 2)
    _run(cluster, "SELECT g FROM generate_series(1, 9) g WHERE g IN (1, 2, 3)", 3)

    record = crowd_scale.statements_top(cluster, cycles=10)

    in_lists = [row for row in record["top"] if "generate_series" in row["query"]]
    assert sorted(row["calls"] for row in in_lists) == [2, 3]
    (family,) = [row for row in record["families"] if "generate_series" in row["query"]]
    assert (family["statements"], family["calls_per_cycle"]) == (2, 0.5)
    assert family["exec_ms_per_cycle"] == pytest.approx(
        sum(row["exec_ms"] for row in in_lists) / 10, abs=0.02
    )


def test_without_the_option_the_cluster_has_no_statements_to_record() -> None:
    with private_cluster(()) as bench:
        crowd_scale.statements_enable(bench)
        with pytest.raises(Exception, match="pg_stat_statements must be loaded"):
            crowd_scale.statements_top(bench, cycles=1)
