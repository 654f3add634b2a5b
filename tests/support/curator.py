"""The named curator of tests/conftest.py logging in through the login page in Chromium."""

from __future__ import annotations

from typing import Any

CURATOR_PASSWORD = "curator-password-1"


def curator_log_in(page: Any, url: str) -> None:
    """Open `url` (a dashboard page), log in as `curator` on the login page it leads to, and wait
    until the browser is back on `url`."""
    page.goto(url)
    page.get_by_label("Username").fill("curator")
    page.get_by_label("Password").fill(CURATOR_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(url)
