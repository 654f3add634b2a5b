"""The test-retest panels of the campaign page and of a worker's page, in Debian's Chromium
(Playwright) against a live server on PostgreSQL, at 1280×800 and 390×844: the figures a curator
reads equal the API's, nothing overflows a phone's width, and a worker with too few pairs shows
no kappa. Screenshots go to $LEPUS_SCREENSHOT_DIR (a temporary folder by default)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from annotation.models import CampaignCandidate, Participation
from annotation.quality.consistency import campaign_retest
from tests.annotation.crowd.test_retest_repeats import Rater, _campaign
from tests.annotation.crowd_factories import clips_with_candidates
from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZES = ((1280, 800), (390, 844))


@pytest.fixture
def browser() -> Iterator[object]:
    with chromium_browser() as chromium:
        yield chromium


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("LEPUS_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _format(value: float | None) -> str:
    # As the page's floatformat:3 rounds the API's 4-decimal figure: half up in decimal (an
    # f-string rounds the binary float, so 0.5455 would print 0.545 against the page's 0.546).
    if value is None:
        return "n/a"
    return str(Decimal(str(value)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP))


def test_the_retest_panels_show_the_apis_figures_at_desktop_and_phone_width(
    live_server, browser, curator, tmp_path
):
    clips = clips_with_candidates(clips=12, candidates_per_clip=2)
    campaign = _campaign(
        "retest-page",
        clips,
        retest_share=0.25,
        retest_min_gap=2,
        qc_rules={"too_fast": False, "inconsistent_retest": {"enabled": True, "min_pairs": 4}},
    )
    ids = sorted(CampaignCandidate.objects.filter(campaign=campaign).values_list("id", flat=True))
    positions = {pk: index for index, pk in enumerate(ids)}
    raters = [
        Rater("steady-worker-with-a-long-prolific-id", consistent=True, positions=positions),
        Rater("erratic-worker", consistent=False, positions=positions),
        Rater("brief-worker", consistent=True, positions=positions),
    ]
    for rater in raters:
        rater.join(campaign.slug)
    for rater in raters[:2]:
        while rater.step() is not None:
            pass
    for _ in range(6):  # one repeat at most: fewer pairs than min_pairs
        raters[2].step()

    figures = campaign_retest(campaign=campaign)
    api = APIClient()
    api.force_login(curator)
    assert api.get(f"/api/v1/campaigns/{campaign.slug}/quality/retest").json() == figures
    rows = {row["external_id"]: row for row in figures["workers"]}
    assert rows["steady-worker-with-a-long-prolific-id"]["kappa"] == 1.0
    assert rows["brief-worker"]["pairs"] < 4 and rows["brief-worker"]["kappa"] is None

    shots = _shots(tmp_path)
    page = browser.new_page()
    page.goto(f"{live_server.url}/dashboard/campaigns/{campaign.slug}/")
    page.get_by_label("Username").fill("curator")
    page.get_by_label("Password").fill("curator-password-1")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**/dashboard/campaigns/{campaign.slug}/")
    brief = Participation.objects.get(campaign=campaign, worker__external_id="brief-worker")
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{live_server.url}/dashboard/campaigns/{campaign.slug}/#retest")
        panel = page.locator("#retest")
        summary = page.get_by_test_id("retest-summary").inner_text()
        assert (
            f"{figures['repeats_submitted']} repeats rated of {figures['repeats_served']} served"
            in summary
        )
        assert f"{figures['pairs']} repeated candidates from 3 worker(s)" in summary
        kappa = page.get_by_test_id("retest-kappa").inner_text()
        assert kappa == _format(figures["worker_kappa_mean"])
        median = page.get_by_test_id("retest-kappa-median").inner_text()
        assert median == _format(figures["worker_kappa_median"])
        pooled = page.get_by_test_id("retest-kappa-pooled").inner_text()
        assert pooled == _format(figures["pooled_kappa"])
        question_rows = page.get_by_test_id("retest-questions").locator("tbody tr")
        for index, row in enumerate(figures["questions"]):
            cells = question_rows.nth(index).locator("td").all_inner_texts()
            assert cells[:5] == [
                row["label"],
                str(row["pairs"]),
                _format(row["worker_kappa_mean"]),
                _format(row["worker_kappa_median"]),
                _format(row["pooled_kappa"]),
            ]
        worker_rows = page.get_by_test_id("retest-workers").locator("tbody tr")
        assert worker_rows.count() == 3
        for index, row in enumerate(figures["workers"]):
            cells = worker_rows.nth(index).locator("td").all_inner_texts()
            shown = _format(row["kappa"]) if row["enough_pairs"] else "too few pairs"
            assert cells[:3] == [row["external_id"], str(row["pairs"]), shown]
        # The page never scrolls sideways; a wide table scrolls inside its card.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        panel.scroll_into_view_if_needed()
        panel.screenshot(path=str(shots / f"campaign-retest-{width}x{height}.png"))

        page.goto(f"{live_server.url}/dashboard/campaigns/{campaign.slug}/workers/{brief.pk}/")
        text = page.get_by_test_id("worker-retest-summary").inner_text()
        assert f"{rows['brief-worker']['pairs']} repeated candidates." in text
        assert "Too few pairs for a kappa: it is shown from 4 on." in text
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.locator("#retest").screenshot(path=str(shots / f"worker-retest-{width}x{height}.png"))
        steady = Participation.objects.get(
            campaign=campaign, worker__external_id="steady-worker-with-a-long-prolific-id"
        )
        page.goto(f"{live_server.url}/dashboard/campaigns/{campaign.slug}/workers/{steady.pk}/")
        assert (
            "Kappa 1.000 (mean over the questions)."
            in page.get_by_test_id("worker-retest-summary").inner_text()
        )
    page.close()
