"""Debian's Chromium, headless, driven by Playwright: the one way every browser test starts it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def chromium_browser() -> Iterator[Any]:
    """A launched Chromium, closed on exit. Playwright's sync API runs an event loop in this
    thread, so Django's async-safety check is switched off meanwhile (the live server's database
    access happens in its own thread)."""
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            try:
                yield browser
            finally:
                # ORM calls made while Playwright's loop runs get their own connection (another
                # async context); close it here or the test database cannot be dropped at the end
                # ("database ... is being accessed by other users").
                from django.db import connections

                connections.close_all()
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous
