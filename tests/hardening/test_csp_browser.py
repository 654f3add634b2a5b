"""The Content-Security-Policy holds without breaking a page: Debian's Chromium (Playwright) visits
every curator page and the rating page against a live server on PostgreSQL, each answer carries a
policy, and the browser reports no violation (no inline script, style or handler was blocked);
the one behaviour that used an inline handler (the training list's status filter) still works."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import Client

from tests.hardening.world import build_world
from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Records every violation the browser reports, from the first script of each document on.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (event) {
  window.__cspViolations.push(event.violatedDirective + " " + (event.blockedURI || "inline"));
});
"""


@pytest.fixture
def chromium() -> Iterator[object]:
    with chromium_browser() as browser:
        yield browser


def test_every_page_works_under_its_content_security_policy(
    live_server, chromium, curator, admin_user, outsider
):
    world = build_world(curator=curator, admin=admin_user, outsider=outsider)
    slug = world.campaign.slug
    session = Client()
    session.force_login(curator)
    context = chromium.new_context()
    context.add_init_script(RECORD_VIOLATIONS)
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": session.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    base = f"{live_server.url}/dashboard/campaigns/{slug}"
    urls = [
        f"{live_server.url}/dashboard/",
        f"{base}/",
        f"{base}/edit/",
        f"{base}/links/",
        f"{base}/workers/",
        f"{base}/review/",
        f"{base}/review/{world.review_item.pk}/",
        f"{base}/audit/",
        f"{base}/leaderboard/",
        f"{live_server.url}/dashboard/datasets/",
        f"{live_server.url}/dashboard/releases/",
        f"{live_server.url}/dashboard/releases/{world.release.pk}/",
        f"{live_server.url}/dashboard/training/",
        f"{live_server.url}/dashboard/training/{world.training_run.pk}/",
        f"{live_server.url}/admin/",
    ]
    for url in urls:
        response = page.goto(url)
        assert response is not None and response.status == 200, url
        assert "script-src 'self'" in response.headers["content-security-policy"], url
        page.wait_for_load_state("load")
        assert page.evaluate("window.__cspViolations") == [], url
    # The status filter submits itself on change (static/js/pages.js, no inline handler).
    page.goto(f"{live_server.url}/dashboard/training/")
    page.get_by_label("Status").select_option("failed")
    page.wait_for_url("**/dashboard/training/?status=failed")
    assert page.evaluate("window.__cspViolations") == []

    worker_page = context.new_page()
    worker_page.on("console", lambda message: console.append(message.text))
    answer = worker_page.goto(f"{live_server.url}/w/{slug}/?PROLIFIC_PID=5f00000000000000000000cc")
    assert answer is not None and "frame-ancestors" in answer.headers["content-security-policy"]
    worker_page.get_by_role("button", name="I agree — start").click()
    worker_page.locator("#candidates fieldset").first.wait_for()
    assert worker_page.evaluate("window.__cspViolations") == []
    assert [text for text in console if "Content Security Policy" in text] == []
    context.close()
