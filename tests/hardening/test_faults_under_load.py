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

from tests.support.faultload import postgres_restarted_scenario, redis_stopped_scenario

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
    result = redis_stopped_scenario(
        clips=800, workers=6, duration=15, down_from=3, down_until=11, catch_up_timeout=60
    )
    _report("redis_stopped", result)

    _assert_nothing_lost(result)
    # The web path needs neither the broker nor the cache: no 5xx at all.
    assert result["http_5xx"] == 0
    assert result["transport_errors"] == 0
    assert result["acknowledged_during_fault"] > 0
    assert result["acknowledged_after_fault"] > 0
    # The outage left quality work undone; beat's sweep on a real worker caught up.
    assert result["stale_quality_while_down"]["workers_with_stale_stats"] > 0
    assert result["quality_caught_up_s"] is not None, result.get("celery_log_tail")
    assert result["stale_quality_after_sweep"] == {
        "workers_with_stale_stats": 0,
        "workers_with_stats": 6,
    }


def test_postgres_restarted_during_a_load_fails_cleanly_and_loses_nothing():
    result = postgres_restarted_scenario(
        clips=600, workers=6, duration=14, down_from=3, down_until=8
    )
    _report("postgres_restarted", result)

    _assert_nothing_lost(result)
    assert result["refused"] == {}
    # While it was down every failure was a clean 503 (checked per answer in the harness).
    assert result["http_503"] > 0
    assert result["http_5xx"] == result["http_503"]
    assert result["acknowledged_before_fault"] > 0
    assert result["acknowledged_after_fault"] > 0
