"""The worker page's severity intervals in Chromium at 1280 and 390 px: drawn (an inline SVG whose
positions are attributes, since the CSP allows no style="" attribute), with no console error, the
bar where the interval is, and nothing wider than the window."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse

from annotation.quality.calibration_job import calibration_campaign, worker_severities
from tests.annotation.quality.test_calibration_job import harsh_campaign
from tests.support.browser import assert_fits_viewport, chromium_browser, page_at
from tests.support.curator import curator_log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path("/work/shots/severity")


@pytest.mark.parametrize("width", ["wide", "phone"])
def test_the_severity_intervals_are_drawn_under_the_csp(live_server, curator, width):
    campaign, _fair, harsh, _items = harsh_campaign(slug=f"shown-{width}")
    calibration_campaign(campaign=campaign)
    entry = worker_severities(campaign=campaign)[harsh.pk]["relevance"]
    url = live_server.url + reverse(
        "annotation:quality-worker",
        kwargs={"slug": campaign.slug, "participation_id": harsh.pk},
    )
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium_browser() as browser:
        page = page_at(browser, width)
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        curator_log_in(page, url)
        page.reload()
        row = page.locator('tr[data-question="relevance"]')
        track = row.locator("svg.interval").bounding_box()
        bar = row.locator("svg.interval .interval-bar").bounding_box()
        assert track is not None and bar is not None and track["width"] > 40
        # the bar spans the interval on the -3..+3 logit track (50 % is zero)
        low = (min(3.0, max(-3.0, entry["low"])) + 3) / 6
        assert abs((bar["x"] - track["x"]) / track["width"] - low) < 0.03
        assert bar["width"] > 0
        page.screenshot(path=str(SHOTS / f"worker-severity-{width}.png"), full_page=True)
        assert_fits_viewport(page)  # wide tables scroll inside their card
        assert problems == []
