"""The two widest tables of the dashboard, filled as a real campaign fills them, at a laptop's
and a phone's width (issue 24, point 6: "the workers table and the candidate page's judgments
table are cut off at 1280 px").

The world is what made them overflow on the demo and what the every-page test's world lacked:
Prolific ids (24 characters), a reason a sentence long, every QC statistic filled in (controls,
agreement, a calibrated severity with its interval), flags with their explanations, a worker
excluded by a curator. At 1280 px each table shows every column without scrolling sideways
inside its card (nothing cut off at the card's edge); at 390 px the page still fits the screen,
the tables scroll inside their cards, and the workers table keeps the worker's id in view.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from annotation.models import CampaignCandidate, Participation
from annotation.quality.calibration_job import calibration_run_inline
from annotation.quality.controls import controls_generate
from annotation.quality.exclusions import worker_exclude
from annotation.quality.run import qc_campaign_full
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker
from tests.support.browser import (
    VIEWPORTS,
    assert_fits_viewport,
    assert_no_sideways_scroll,
    chromium_browser,
    log_in,
    page_at,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SLUG = "wide-tables"
KEYS = ("descriptiveness", "relevance", "fluency")
# Prolific worker ids are 24 hexadecimal characters.
WORKERS = [f"5f0c0ffee0ddba11c0ffee{index:02d}" for index in range(6)]
REASON = (
    "The caption names the guitar and the stage but misses the second person who sings, and "
    "the last sentence repeats the first one almost word for word."
)


@pytest.fixture
def wide_world(curator) -> dict[str, Any]:
    generator = random.Random(24)
    campaign = quality_crowd_campaign(slug=SLUG, clips=3, candidates_per_clip=3, quota=len(WORKERS))
    controls_generate(campaign=campaign, rate=0.5, seed=4)
    items = list(CampaignCandidate.objects.filter(campaign=campaign).order_by("pk"))
    participations = [quality_worker(campaign, name) for name in WORKERS]
    for index, participation in enumerate(participations):
        uniform = index == len(participations) - 1
        for item in items:
            server_ms = generator.randint(14_000, 60_000)
            judgment = quality_judge(
                participation,
                item,
                {key: 3 if uniform else generator.randint(1, 5) for key in KEYS},
                server_ms=server_ms,
            )
            judgment.reason = REASON
            judgment.client_active_ms = server_ms - 1_000
            judgment.client_video_played_ms = 10_000
            judgment.save(update_fields=["reason", "client_active_ms", "client_video_played_ms"])
    qc_campaign_full(campaign=campaign)
    calibration_run_inline(campaign=campaign)
    worker_exclude(
        participation=Participation.objects.get(campaign=campaign, worker__external_id=WORKERS[0]),
        actor=curator,
        reason="Rated the clips of another study by mistake, says the message they sent us.",
    )
    return {"campaign": campaign, "item": next(item for item in items if not item.is_control)}


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium_browser() as launched:
        yield launched


def test_the_workers_table_and_the_judgments_table_are_read_whole(
    live_server, browser, wide_world, tmp_path
):
    shots = Path(os.environ.get("LEPUS_SCREENSHOTS") or tmp_path) / "wide-tables"
    shots.mkdir(parents=True, exist_ok=True)
    pages = {
        # Sorted by a column with a long header: its arrow widens it.
        "workers": f"/dashboard/campaigns/{SLUG}/workers/?sort=agreement&order=desc",
        "candidate": f"/dashboard/datasets/candidates/{wide_world['item'].pk}/",
        # The data browser's lists of the same rows.
        "judgments": f"/dashboard/datasets/judgments/?campaign={SLUG}",
        "browse-workers": f"/dashboard/datasets/workers/?campaign={SLUG}",
    }
    problems: list[str] = []
    for width in VIEWPORTS:
        page = page_at(browser, width)
        log_in(
            page,
            f"{live_server.url}{pages['workers']}",
            username="curator",
            password="curator-password-1",
        )
        for name, path in pages.items():
            page.goto(f"{live_server.url}{path}")
            page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
            checks = [assert_fits_viewport]
            if width == "wide":
                checks.append(assert_no_sideways_scroll)
            for check in checks:
                try:
                    check(page)
                except AssertionError as error:
                    problems.append(f"{name} at {width}: {error}")
        # On a phone the workers table scrolls inside its card, and the worker's id stays in
        # view however far it is scrolled.
        page.goto(f"{live_server.url}{pages['workers']}")
        wrap = page.locator("div.table-wrap:has(table.workers)")
        wrap.evaluate("element => { element.scrollLeft = element.scrollWidth; }")
        scrolled = wrap.evaluate("element => element.scrollLeft")
        first = page.locator("table.workers tbody tr[data-worker] td:first-child").first
        box, cell = wrap.bounding_box(), first.bounding_box()
        if width == "phone":
            assert scrolled > 0
        assert box["x"] <= cell["x"] and cell["x"] + cell["width"] <= box["x"] + box["width"]
        page.context.close()
    assert not problems, "\n".join(problems)
