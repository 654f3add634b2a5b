"""Every page, in Chromium, at a laptop's and a phone's width.

The pages are taken from the permission matrix (`tests/hardening/test_permission_matrix.py`):
every GET route outside the API and Django's admin that a curator is shown (200, HTML). A new page
therefore joins this test as soon as it has its row there. Each is opened in a logged-in curator's
browser on the live server, over the matrix's world (a campaign with crowd work, QC, review items,
releases, training runs, webhook endpoints), and must answer 200, have a heading, and fit the
screen: nothing wider than the viewport (wide tables scroll inside their card). A screenshot of
each is saved for a person to look at (`LEPUS_SCREENSHOTS`, else the test's temporary folder).

Pages with interactions of their own (the worker's rating page, review, imports, figures) have
their own browser tests beside their code; this one is the floor every page stands on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.test import Client

from tests.hardening.test_permission_matrix import ROUTES
from tests.hardening.world import build_world
from tests.support.browser import VIEWPORTS, assert_fits_viewport, chromium_browser, log_in, page_at

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


def test_every_curator_page_fits_both_widths(live_server, curator, admin_user, outsider, tmp_path):
    world = build_world(curator=curator, admin=admin_user, outsider=outsider)
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
                try:
                    assert_fits_viewport(page)
                except AssertionError as error:
                    problems.append(f"{route} {path} at {width}: {error}")
            page.context.close()
    assert not problems, "\n".join(problems)
