"""Faults during a load of crowd submissions, on a production-like stack (gunicorn, `config.settings`
with DEBUG off, private PostgreSQL and Redis on loopback; see `tests/support/faultload.py`):

- Redis (broker and cache) stopped: submissions are still accepted and stored; the quality work
  they defer catches up on a real Celery worker once Redis is back.
- PostgreSQL crashed and restarted: requests fail with a clean 503 while it is down, succeed
  after, and no acknowledged submission is lost.

Set LEPUS_FAULT_REPORT to a folder to keep each scenario's counts as JSON (bench/faults.py runs the
same scenarios with bigger counts for docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.faultload import Fault, run_load, running_stack, stale_quality_counts
from tests.support.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.celery_worker]


def _report(name: str, result: dict[str, Any]) -> None:
    folder = os.environ.get("LEPUS_FAULT_REPORT")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")


def _assert_nothing_lost(result: dict[str, Any]) -> None:
    assert result["threads_still_running"] == 0
    assert result["abandoned_submits"] == 0
    assert result["http_500"] == 0, result["unclean_5xx_examples"]
    assert result["unclean_5xx"] == 0, result["unclean_5xx_examples"]
    assert result["lost_acknowledged"] == 0
    assert result["stored_unacknowledged"] == 0
    assert result["submissions_acknowledged"] == result["submissions_stored"] > 0
    assert result["judgments_acknowledged"] == result["judgments_stored"]


def test_redis_stopped_during_a_load_submissions_are_stored_and_quality_catches_up():
    with running_stack(clips=150) as stack:
        stack.start_celery()
        stale_while_down: dict[str, int] = {}

        def restart_redis() -> None:
            # Before Redis comes back: the quality work of the outage's submissions is pending.
            stale_while_down.update(stale_quality_counts(stack))
            stack.redis.start()

        fault = Fault(
            "redis stopped", start_at=3, begin=stack.redis.stop, end_at=11, end=restart_redis
        )
        result = run_load(stack, workers=6, duration=15, fault=fault, pause=0.05)
        result["stale_quality_while_down"] = dict(stale_while_down)

        _assert_nothing_lost(result)
        # The web path never needed the broker nor the cache: no 5xx at all.
        assert result["http_5xx"] == 0
        assert result["transport_errors"] == 0
        assert result["acknowledged_during_fault"] > 0
        assert result["acknowledged_after_fault"] > 0
        assert stale_while_down["workers_with_stale_stats"] > 0

        # Beat's quality sweep (every 5 minutes) brings every worker's statistics up to date.
        stack.send_task("annotation.quality_sweep")
        wait_until(
            lambda: stale_quality_counts(stack)["workers_with_stale_stats"] == 0,
            timeout=60,
            interval=0.5,
            message=f"the quality sweep; celery log:\n{stack.log('celery.log')[-3000:]}",
        )
        result["stale_quality_after_sweep"] = stale_quality_counts(stack)
        assert result["stale_quality_after_sweep"]["workers_with_stats"] == result["joined"] == 6
        _report("redis_stopped", result)


def test_postgres_restarted_during_a_load_fails_cleanly_and_loses_nothing():
    with running_stack(clips=150) as stack:
        fault = Fault(
            "postgres restarted (immediate stop)",
            start_at=3,
            begin=lambda: stack.postgres.stop(mode="immediate"),
            end_at=8,
            end=stack.postgres.start,
        )
        result = run_load(stack, workers=6, duration=14, fault=fault, pause=0.05)

        _assert_nothing_lost(result)
        # While it was down every failure was a clean 503 (checked per answer in the harness).
        assert result["http_503"] > 0
        assert result["http_5xx"] == result["http_503"]
        assert result["acknowledged_before_fault"] > 0
        assert result["acknowledged_after_fault"] > 0
        _report("postgres_restarted", result)
