"""The Metrics page in Chromium at 1280 and 390 px: the stored figures as the API gives them, the
unavailable rows with their reason, the published figures with their place, nothing wider than
the screen. Screenshots under /work/shots/metrics/."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.metrics.vatex_eval_data import vatex_eval_subset
from tests.support.browser import VIEWPORTS, assert_fits_viewport, log_in, page_at
from tests.training_bridge.metric_benchmark_data import VATEX_EVAL_SLUG, build_vatex_eval_campaign
from training_bridge.services.metric_leaderboard import metric_leaderboard

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/work/shots/metrics")


@pytest.mark.parametrize("width", list(VIEWPORTS))
def test_the_metrics_page_shows_the_api_s_figures(live_server, chromium, curator, width) -> None:  # type: ignore[no-untyped-def]
    SHOTS.mkdir(parents=True, exist_ok=True)
    build_vatex_eval_campaign(vatex_eval_subset(60))
    for refs in ("1", "all"):
        call_command(
            "evaluate_metrics", "--campaign", VATEX_EVAL_SLUG, "--protocol", "emscore",
            "--refs", refs, "--metrics", "bleu1,rougeL,cider,expert_judge,captionqa", "--save",
            "--json", stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    board = json.loads(json.dumps(metric_leaderboard()))
    page = page_at(chromium, width)
    log_in(
        page,
        f"{live_server.url}/dashboard/training/metrics/",
        username="curator",
        password="curator-password-1",
    )
    sections = page.locator("section.metrics-section")
    assert sections.count() == len(board["sections"]) == 2
    for index, section in enumerate(board["sections"]):
        shown = sections.nth(index)
        for row in section["rows"]:
            line = shown.locator(f'tr[data-metric="{row["metric"]}"]')
            if row["unavailable"]:
                assert line.locator("td.unavailable").inner_text() == (
                    f"unavailable: {row['unavailable']}"
                )
                continue
            for key in ("kendall_b", "kendall_c", "spearman", "pearson"):
                cell = line.locator(f'td[data-key="{key}"]').inner_text()
                assert cell == ("–" if row[key] is None else str(row[key]))
            if row["published"]:
                text = line.locator("td.published").inner_text()
                for figure in row["published"]:
                    assert figure["place"] in text
                    for value in figure["values"].values():
                        assert str(value) in text
    assert "CIDEr" in page.locator('tr[data-metric="cider"]').first.inner_text()
    assert page.locator('section[data-benchmark="Flickr8K-Expert"] tr[data-metric="expert_judge"]').count() == 1  # fmt: skip
    assert page.get_by_role("link", name="Metrics").count() >= 1
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"metrics-{width}.png"), full_page=True)
