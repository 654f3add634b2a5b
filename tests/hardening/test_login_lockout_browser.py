"""The login page's refusal in Chromium at 1280 and 390 px (issue 25, point 3): after the
failures of one address the page says what happened and fits the screen; screenshots are saved
for a person to look at (`LEPUS_SCREENSHOTS`, else the test's temporary folder). That another
address still logs in is tests/hardening/test_production_hardening.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.cache import cache

from tests.support.browser import VIEWPORTS, assert_fits_viewport, chromium_browser, page_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _submit(page, url: str, password: str) -> int:  # type: ignore[no-untyped-def]
    page.goto(url)
    page.fill("#id_username", "curator")
    page.fill("#id_password", password)
    with page.expect_navigation() as navigation:
        page.click("button[type=submit]")
    return int(navigation.value.status)


def test_the_refusal_reads_well_and_fits_at_both_widths(live_server, curator, settings, tmp_path):
    settings.LEPUS_LOGIN_MAX_FAILURES = 2
    shots = Path(os.environ.get("LEPUS_SCREENSHOTS") or tmp_path) / "login-lockout"
    shots.mkdir(parents=True, exist_ok=True)
    login = f"{live_server.url}/accounts/login/"
    with chromium_browser() as browser:
        for width in VIEWPORTS:
            cache.clear()
            page = page_at(browser, width)
            assert [_submit(page, login, f"guess-{n}") for n in range(2)] == [200, 200]
            assert _submit(page, login, "curator-password-1") == 429
            refusal = page.locator("p.error").inner_text()
            assert refusal == (
                "Too many failed log-in attempts from this address. Try again in 15 minutes."
            )
            assert_fits_viewport(page)
            page.screenshot(path=str(shots / f"login-locked-{width}.png"), full_page=True)
            page.context.close()
    cache.clear()
