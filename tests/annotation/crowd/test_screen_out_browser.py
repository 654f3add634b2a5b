"""A worker whom quality control screens out, in Chromium against a live server: quality control
runs after the submit (as the Celery pass does, seconds later), when the page already shows the
next clip. The page must show the screen-out before the worker rates that clip (not refuse their
ratings afterwards), with the screen-out code, a text naming only what is there, and the erase
link of the normal end page, which works."""

from __future__ import annotations

import time

import pytest

from annotation.models import (
    Assignment,
    AssignmentStatus,
    Judgment,
    Participation,
    ParticipationStatus,
    Worker,
)
from annotation.tasks import after_submission
from tests.annotation.crowd import test_worker_page_browser as rating_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

mp4_file = rating_page.mp4_file
chromium = rating_page.chromium
browser = rating_page.browser

VIEWPORTS = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
PID = "5f0000000000000000000e02"
INSTRUCTION = (
    "Please return to Prolific and enter this screen-out code, so that your submission is "
    "recorded as screened out."
)


def _wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _fits(page, width: int) -> bool:
    return page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_the_screen_out_comes_before_the_worker_rates_the_clip_handed_out_before_it(
    live_server, browser, chromium, mp4_file, viewport
):
    campaign, _clips = rating_page.make_campaign(
        mp4_file,
        clips=3,
        slug=f"out-{viewport}",
        screen_out_code="SCREENED-9",
        qc_rules={"uniform": {"min_assignments": 1, "max_uniform_share": 0.5}},
    )
    width = VIEWPORTS[viewport]["width"]
    page = browser.new_page()
    page.set_viewport_size(VIEWPORTS[viewport])
    url = f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID={PID}"
    page.goto(url)
    page.get_by_role("button", name="I agree — start").click()
    page.locator("#candidates fieldset").first.wait_for()
    page.get_by_role("button", name="Play clip").click()
    page.get_by_text("Ratings unlocked: rate every caption").wait_for(timeout=15_000)

    # Clip 1, every rating the same: the uniform rule will exclude this worker.
    for radio in page.get_by_role("radio", name="5 — Excellent").all():
        radio.check()
    page.get_by_role("button", name="Submit", exact=True).click()
    _wait_for(
        lambda: Assignment.objects.filter(participation__worker__external_id=PID).count() == 2
    )
    first, second = Assignment.objects.order_by("pk")
    assert first.status == AssignmentStatus.SUBMITTED and second.status == AssignmentStatus.LIVE
    page.get_by_text("Watch the whole clip to unlock the ratings.").wait_for()

    # The quality pass of the submit runs now, while clip 2 is on the worker's screen.
    after_submission(first.pk)
    participation = Participation.objects.get(worker__external_id=PID)
    assert participation.status == ParticipationStatus.EXCLUDED
    second.refresh_from_db()
    assert second.status == AssignmentStatus.EXPIRED

    # The worker plays clip 2: the screen-out replaces it before any rating (when the ratings
    # unlock; on a slow machine the page's 10-second check may already have shown it, so the
    # button is pressed from script, which needs it to be on screen no longer).
    page.evaluate("document.getElementById('play').click()")
    page.get_by_role("heading", name="Your participation has ended").wait_for(timeout=15_000)
    assert page.locator("#task").is_hidden()
    assert page.locator("#screened-out-code").text_content() == "SCREENED-9"
    assert page.locator("#screened-out-instruction").text_content() == INSTRUCTION
    screen = page.locator("#screened-out")
    assert "link" not in screen.inner_text().replace("Erase my data from this study", "")
    assert page.get_by_role("link", name="Return to the study platform").count() == 0
    erase = page.get_by_role("link", name="Erase my data from this study")
    assert erase.is_visible()
    assert _fits(page, width)
    # Nothing of clip 2 was submitted; clip 1's ratings are stored (and excluded by the rule).
    assert Assignment.objects.get(pk=second.pk).submitted_at is None
    assert list(Judgment.objects.values_list("assignment_id", "is_excluded").distinct()) == [
        (first.pk, True)
    ]

    # The erase link works as on the normal end page.
    erase.click()
    page.wait_for_url(f"**/w/{campaign.slug}/erase/")
    page.get_by_role("button", name="Erase my data").click()
    page.get_by_role("heading", name="Your data has been erased").wait_for(timeout=15_000)
    assert page.locator("#erase-summary").inner_text() == (
        "2 of your ratings were deleted; 0 texts you typed were deleted, and this study no longer "
        "holds your participant id."
    )
    assert Judgment.objects.count() == 0
    assert not Worker.objects.filter(external_id=PID).exists()


def test_opening_the_link_again_shows_the_screen_out_with_the_erase_link(
    live_server, browser, mp4_file
):
    from annotation.quality.exclusions import worker_exclude
    from tests.annotation.crowd_factories import crowd_join

    campaign, _clips = rating_page.make_campaign(
        mp4_file, clips=1, slug="out-again", screen_out_code="SCREENED-9"
    )
    _token, participation = crowd_join(campaign, PID)
    worker_exclude(participation=participation, actor=None, reason="test")

    page = browser.new_page()
    page.goto(f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID={PID}")

    assert page.get_by_role("heading", name="Your participation has ended").is_visible()
    assert page.locator(".code").text_content() == "SCREENED-9"
    assert page.get_by_text(INSTRUCTION).is_visible()
    link = page.get_by_role("link", name="Erase my data from this study")
    assert link.get_attribute("href") == f"/w/{campaign.slug}/erase/"
    assert page.get_by_role("link").count() == 1  # no "link below" that is not there
