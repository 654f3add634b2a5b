"""bench/adaptive_allocation.py (issue 28, point 3) runs in its small `--smoke` configuration and
its figures hold together: the fixed policy pays exactly N per candidate, adaptive never exceeds
its maximum, the replay reaches the 3-rater mean with all three ratings. No database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "adaptive_allocation.py"


def _run(*arguments: str, results: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"
    }
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments, "--results", str(results)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("adaptive")
    png = folder / "plot.png"
    completed = _run("--smoke", "--png", str(png), results=folder)
    assert completed.returncode == 0, completed.stderr
    raws = list(folder.glob("adaptive_allocation_*.json"))
    assert len(raws) == 1
    return json.loads(raws[0].read_text()), png


def test_the_raw_file_has_provenance_and_the_plot_is_drawn(smoke):
    raw, png = smoke
    assert raw["benchmark"] == "adaptive_allocation"
    assert raw["git"]["commit"]
    assert "--smoke" in raw["command"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fixed_pays_exactly_n_and_adaptive_stays_within_its_bounds(smoke):
    raw, _ = smoke
    policies = raw["figures"]["simulation"]["policies"]
    fixed = [entry for entry in policies.values() if entry["family"] == "fixed"]
    assert len(fixed) == 4
    for entry in fixed:
        judgments = entry["policy"]["judgments"]
        for run in entry["runs"]:
            assert run["paid_per_candidate"] == judgments
            assert run["max_bought"] == judgments
            assert run["stopped_settled"] == 0
            assert run["stopped_maximum"] + run["stopped_review"] == pytest.approx(1.0)
    adaptive = [entry for entry in policies.values() if entry["family"] != "fixed"]
    assert {entry["family"] for entry in adaptive} == {"adaptive", "adaptive+metric"}
    for entry in adaptive:
        minimum, maximum = entry["policy"]["minimum"], entry["policy"]["maximum"]
        assert entry["max_bought_any_seed"] <= maximum
        for run in entry["runs"]:
            # Below the minimum only candidates that reached the review range early.
            assert minimum - run["stopped_review"] <= run["paid_per_candidate"] <= maximum
            shares = run["stopped_settled"] + run["stopped_maximum"] + run["stopped_review"]
            assert shares == pytest.approx(1.0)
            # A candidate reaching the review range stops there, so the share the review rule
            # takes is the share that stopped for review.
            assert run["review_share"] == pytest.approx(run["stopped_review"])
            assert -1.0 <= run["alpha"] <= 1.0
            assert 0.0 < run["pearson"] <= 1.0
    # More fixed judgments, a better aggregate: the simulation is not noise.
    pearson = [policies[f"fixed-{n}"]["median"]["pearson"] for n in (2, 3, 4, 5)]
    assert pearson == sorted(pearson)


def test_the_fit_and_the_metric_are_stated(smoke):
    raw, _ = smoke
    figures = raw["figures"]
    fit = figures["fit"]
    assert len(fit["thresholds"]) == 4 and fit["thresholds"] == sorted(fit["thresholds"])
    assert len(fit["column_severities"]) == 3
    assert fit["planted_severity_sd"] > 0 and fit["planted_quality_sd"] > 0
    assert sum(fit["real_rating_shares"]) == pytest.approx(1.0, abs=1e-3)
    configuration = figures["configuration"]
    assert abs(configuration["metric_kendall_reached_seed_999"] - 0.368) < 0.01
    verdict = figures["target"]
    assert verdict["fixed3"] == figures["simulation"]["policies"]["fixed-3"]["median"]
    for family in ("adaptive", "adaptive+metric"):
        assert isinstance(verdict[family]["met"], bool)


def test_the_replay_orders_the_real_judgments_and_reaches_the_3_rater_mean(smoke):
    raw, _ = smoke
    replay = raw["figures"]["replay"]
    for order in ("adaptive", "random"):
        curve = replay["median"][order]
        assert curve["3"] == pytest.approx(1.0)
        pearson = [curve[f"{budget:g}"] for budget in replay["budgets"]]
        assert pearson == sorted(pearson)
    # Both orders share every rating up to two per candidate.
    assert replay["median"]["adaptive"]["2"] == replay["median"]["random"]["2"]
    stop = replay["at_adaptive_stop"]["adaptive"]
    assert 2.0 <= stop["budget"] <= 3.0


def test_the_benchmark_stops_with_an_error_when_its_input_is_missing(tmp_path):
    completed = _run("--smoke", "--data", str(tmp_path / "absent.json"), results=tmp_path)
    assert completed.returncode != 0
    assert "missing input" in completed.stderr and "absent.json" in completed.stderr
    assert list(tmp_path.glob("adaptive_allocation_*.json")) == []
