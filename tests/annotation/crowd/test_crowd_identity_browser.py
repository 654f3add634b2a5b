"""The browser key in Chromium against a live server (docs/crowd-flow.md, "Who a worker is"): the
same browser comes back to its session (a reload, a new tab), another browser opening the same
link gets no token and says why, and the first browser's session goes on untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from annotation.crowd.services.workers import IN_USE_ELSEWHERE_DETAIL, token_hash
from annotation.models import Assignment, Participation
from tests.annotation.crowd import test_worker_page_browser as rating_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

mp4_file = rating_page.mp4_file
chromium = rating_page.chromium

VIEWPORTS = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
PID = "5f0000000000000000000e25"
SHOTS = Path("/work/shots/identity")


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_only_the_browser_that_joined_first_continues_the_session(
    live_server, chromium, mp4_file, viewport
):
    campaign, _clips = rating_page.make_campaign(mp4_file, clips=3, slug=f"identity-{viewport}")
    url = f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID={PID}"
    first_browser = chromium.new_context(viewport=VIEWPORTS[viewport])
    other_browser = chromium.new_context(viewport=VIEWPORTS[viewport])
    try:
        first = first_browser.new_page()
        first.goto(url)
        first.get_by_role("button", name="I agree — start").click()
        first.locator("#candidates fieldset").first.wait_for()
        clip_src = first.locator("#clip").get_attribute("src")
        participation = Participation.objects.get()
        key = first.evaluate("window.localStorage.getItem('lepus-browser-key')")
        assert len(key) == 43
        assert participation.browser_key_hash == token_hash(key)

        # Another browser with the same link: consent, start, and a clear refusal, no clip.
        intruder = other_browser.new_page()
        intruder.goto(url)
        intruder.get_by_role("button", name="I agree — start").click()
        intruder.get_by_role("heading", name="This study is open in another browser").wait_for(
            timeout=15_000
        )
        assert intruder.locator("#in-use-elsewhere-message").inner_text() == IN_USE_ELSEWHERE_DETAIL
        assert intruder.locator("#task").is_hidden() and intruder.locator("#consent").is_hidden()
        assert intruder.evaluate("window.sessionStorage.length") == 0  # no token kept
        SHOTS.mkdir(parents=True, exist_ok=True)
        intruder.screenshot(path=str(SHOTS / f"in-use-elsewhere-{viewport}.png"), full_page=True)
        width = VIEWPORTS[viewport]["width"]
        assert intruder.evaluate("document.documentElement.scrollWidth") <= width

        # The first browser goes on: a reload resumes the same clip, and a new tab (a new
        # sessionStorage, the same localStorage) joins again and gets the same live clip.
        first.reload()
        first.locator("#candidates fieldset").first.wait_for()
        assert first.locator("#clip").get_attribute("src").split("?")[0] == clip_src.split("?")[0]
        second_tab = first_browser.new_page()
        second_tab.goto(url)
        second_tab.get_by_role("button", name="I agree — start").click()
        second_tab.locator("#candidates fieldset").first.wait_for()
        assert Assignment.objects.count() == 1
        participation.refresh_from_db()
        assert participation.token_generation == 0
    finally:
        first_browser.close()
        other_browser.close()
