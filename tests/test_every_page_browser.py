"""Every page, in Chromium, at a laptop's and a phone's width.

The pages are taken from the permission matrix (`tests/hardening/test_permission_matrix.py`):
every GET route outside the API and Django's admin that a curator is shown (200, HTML). A new page
therefore joins this test as soon as it has its row there. Each is opened in a logged-in curator's
browser on the live server, over the matrix's world (a campaign with crowd work, QC, review items,
releases, training runs, webhook endpoints), and must answer 200, have a heading, and fit the
screen: nothing wider than the viewport, and at 1280 px nothing scrolling sideways inside its card
either (a table cut off at the card's edge: issue 24 found the workers table and the candidate
page's judgments table so on the demo; on a phone wide tables may scroll inside their card). A
screenshot of each is saved for a person to look at (`LEPUS_SCREENSHOTS`, else the test's
temporary folder).

The matrix's world is small and its values short ("worker-a", a reason "fine", no QC statistics),
which is why those tables passed here: `_with_real_lengths` gives it what the demo has — Prolific
ids of 24 characters, reasons a sentence long, and every worker statistic QC computes.

Pages with interactions of their own (the worker's rating page, review, imports, figures) have
their own browser tests beside their code; this one is the floor every page stands on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.test import Client

from annotation.models import Judgment, Worker
from annotation.quality.run import qc_campaign_full
from tests.hardening.test_permission_matrix import ROUTES
from tests.hardening.world import build_world
from tests.support.browser import (
    VIEWPORTS,
    assert_fits_viewport,
    assert_no_sideways_scroll,
    chromium_browser,
    log_in,
    page_at,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SKIP_PREFIXES = ("/api/", "/admin/", "/media/", "/accounts/logout")


def _curator_pages(world, client: Client) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(route, path) of every HTML page the matrix shows a curator with 200."""
    pages = []
    for route, cases in ROUTES.items():
        for case in cases:
            if case.method != "GET" or case.expect.get("curator") != 200:
                continue
            path = case.path(world)
            if path.startswith(SKIP_PREFIXES):
                continue
            answer = client.get(path)
            if answer.status_code == 200 and answer["Content-Type"].startswith("text/html"):
                pages.append((route, path))
    return pages


REASON = (
    "The caption names the guitar and the stage but misses the second person who sings, and "
    "the last sentence repeats the first one almost word for word."
)


def _with_real_lengths(world) -> None:  # type: ignore[no-untyped-def]
    """The world's values at the lengths the demo's have (see the module docstring)."""
    for index, name in enumerate(("worker-a", "worker-b")):
        Worker.objects.filter(external_id=name).update(
            external_id=f"5f0c0ffee0ddba11c0ffee{index:02d}"
        )
    Judgment.objects.filter(campaign=world.campaign).update(reason=REASON)
    qc_campaign_full(campaign=world.campaign)


def test_every_curator_page_fits_both_widths(live_server, curator, admin_user, outsider, tmp_path):
    world = build_world(curator=curator, admin=admin_user, outsider=outsider)
    _with_real_lengths(world)
    client = Client()
    client.force_login(curator)
    pages = _curator_pages(world, client)
    # The dashboard's own pages, at least, are here (a broken filter would pass with none).
    routes = {route for route, _ in pages}
    assert {"annotation:campaign-list", "annotation:campaign-detail", "export:list"} <= routes

    shots = Path(os.environ.get("LEPUS_SCREENSHOTS") or tmp_path) / "every-page"
    shots.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with chromium_browser() as browser:
        for width in VIEWPORTS:
            page = page_at(browser, width)
            log_in(
                page,
                f"{live_server.url}/dashboard/",
                username="curator",
                password="curator-password-1",
            )
            for route, path in pages:
                answer = page.goto(f"{live_server.url}{path}")
                name = re.sub(r"[^a-z0-9]+", "-", route.lower()).strip("-")
                page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
                if answer is None or answer.status != 200:
                    problems.append(f"{route} {path} at {width}: HTTP {answer and answer.status}")
                    continue
                if page.locator("h1").count() == 0:
                    problems.append(f"{route} {path} at {width}: no <h1>")
                checks = [assert_fits_viewport]
                if width == "wide":
                    checks.append(assert_no_sideways_scroll)
                for check in checks:
                    try:
                        check(page)
                    except AssertionError as error:
                        problems.append(f"{route} {path} at {width}: {error}")
            page.context.close()
    assert not problems, "\n".join(problems)
