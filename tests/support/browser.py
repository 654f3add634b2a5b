"""Debian's Chromium, headless, driven by Playwright: the one way every browser test starts it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devtools.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORTS, viewport_overflow


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


def page_at(browser: Any, width: str, **context_options: Any) -> Any:
    """A new page in its own context at one of `VIEWPORTS`."""
    viewport_width, viewport_height = VIEWPORTS[width]
    context = browser.new_context(
        viewport={"width": viewport_width, "height": viewport_height}, **context_options
    )
    return context.new_page()


def log_in(page: Any, url: str, *, username: str, password: str) -> None:
    """Open `url` (a page behind the login), log in, and wait to be back on it."""
    page.goto(url)
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(url)


def assert_fits_viewport(page: Any) -> None:
    """Nothing makes the page wider than the screen (wide tables scroll inside their card); the
    rule is `devtools.browser.viewport_overflow`, which the demo walk applies too."""
    problem = viewport_overflow(page)
    assert not problem, problem


def assert_no_sideways_scroll(page: Any) -> None:
    """No part of the page scrolls sideways inside its box: every table, card and wrapper shows
    its whole width (a table that fits the screen only by scrolling inside its card is cut off
    at the card's edge for whoever does not think to scroll it)."""
    clipped = page.evaluate(
        """() => Array.from(document.querySelectorAll('main *'))
            .filter((element) => {
              const overflow = getComputedStyle(element).overflowX;
              return (overflow === 'auto' || overflow === 'scroll')
                && element.scrollWidth > element.clientWidth + 1;
            })
            .map((element) => `${element.tagName.toLowerCase()}`
              + `${element.className ? '.' + String(element.className).split(' ').join('.') : ''}`
              + ` shows ${element.clientWidth} of ${element.scrollWidth} px`)"""
    )
    assert not clipped, "; ".join(clipped)
