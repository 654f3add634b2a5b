"""The rating page as a person sees it, at 1280×800 and 390×844 (Debian's Chromium, live server,
real MP4 clips): the video stays in view while the captions scroll, a missing rating is marked
at its field and the mark goes when it is filled, number keys rate the focused row, the
"ratings unlocked" notice sits with the video, and a worker excluded by quality control gets the
screen-out page with the campaign's code.

Screenshots go to the test's temporary folder, and also to `$LEPUS_SCREENSHOTS` when it is set.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from annotation.crowd.services.campaigns import campaign_create
from annotation.models import (
    Assignment,
    AssignmentStatus,
    CampaignCandidate,
    Judgment,
    Participation,
    ParticipationStatus,
)
from annotation.quality.exclusions import worker_exclude
from common import storage
from tests.annotation.crowd import test_worker_page_browser as rating_page
from tests.annotation.crowd_factories import ready_clip
from tests.factories import CandidateFactory, SystemFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The rating page tests' fixtures: the MP4 clip, Chromium and a fresh context per test.
mp4_file = rating_page.mp4_file
chromium = rating_page.chromium
browser = rating_page.browser

VIEWPORTS = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
PID = "5f00000000000000000000cc"


def six_caption_campaign(video: Path, *, clips: int = 1, **options):
    captioner = SystemFactory(name="layout-captioner", version="1")
    made = []
    for index in range(clips):
        clip = ready_clip()
        storage.put_file(clip.video_key, video)
        storage.put_file(clip.poster_key, video.with_suffix(".jpg"))
        for position in range(6):
            CandidateFactory(
                clip=clip,
                system=captioner,
                position=position,
                text=f"clip {index}, caption {position}: a man plays a guitar on a stage while "
                "people clap along",
            )
        made.append(clip)
    return campaign_create(
        slug="layout",
        name="Caption quality pilot",
        judgments_per_candidate=1,
        clip_vatex_ids=[clip.vatex_id for clip in made],
        completion_code="LEPUS-OK-7",
        **options,
    )


def shoot(page, tmp_path: Path, name: str) -> None:
    target = tmp_path / f"{name}.png"
    page.screenshot(path=str(target), full_page=False)
    wanted = os.environ.get("LEPUS_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copy(target, Path(wanted) / target.name)


def in_viewport(page, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    size = page.viewport_size
    return bool(
        box
        and box["y"] >= 0
        and box["x"] >= 0
        and box["y"] + box["height"] <= size["height"]
        and box["x"] + box["width"] <= size["width"]
    )


def start(page, url: str) -> None:
    page.goto(url)
    page.get_by_role("button", name="I agree — start").click()
    page.locator("#candidates fieldset").first.wait_for()
    page.get_by_role("button", name="Play clip").click()
    page.get_by_text("Ratings unlocked: rate every caption").wait_for(timeout=15_000)


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_video_stays_in_view_missing_ratings_are_marked_and_number_keys_rate_the_row(
    live_server,
    browser,
    mp4_file,
    tmp_path,
    viewport,
):
    campaign = six_caption_campaign(mp4_file)
    page = browser.new_page()
    page.set_viewport_size(VIEWPORTS[viewport])
    start(page, f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID={PID}")

    # The "ratings unlocked" notice is part of the player, not a line far above it.
    assert page.locator("#player #watch-hint").text_content().startswith("Ratings unlocked")
    assert page.locator("#status").text_content() == ""
    assert in_viewport(page, "#watch-hint")
    # Nothing is wider than the screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORTS[viewport]["width"]

    # Submitting with nothing rated marks every missing rating at its own field.
    page.get_by_role("button", name="Submit", exact=True).click()
    errors = page.locator("#candidates fieldset .field-error")
    assert errors.count() == 18
    first_scale = page.locator("#candidates fieldset").first
    first_error = first_scale.locator(".field-error")
    assert first_error.is_visible()
    assert first_error.text_content() == "Choose a rating for Descriptiveness."
    scale_box, error_box = first_scale.bounding_box(), first_error.bounding_box()
    assert scale_box["y"] <= error_box["y"] <= scale_box["y"] + scale_box["height"]
    assert "18 answers are missing" in page.locator("#form-error").text_content()
    assert Judgment.objects.count() == 0
    # The first missing field got the focus and is visible, not hidden behind the sticky player.
    focused_box = page.evaluate(
        "(() => { const b = document.activeElement.closest('fieldset').getBoundingClientRect();"
        " return {top: b.top, bottom: b.bottom}; })()"
    )
    player_box = page.locator("#player").bounding_box()
    if viewport == "phone":
        assert focused_box["top"] >= player_box["y"] + player_box["height"] - 1
    shoot(page, tmp_path, f"worker-missing-{viewport}")

    # Number keys rate the row that has the focus; its message goes, the others stay.
    first_scale.locator("input[type=radio]").first.focus()
    page.keyboard.press("4")
    assert first_scale.locator("input:checked").get_attribute("value") == "4"
    assert not first_error.is_visible()
    assert errors.locator("visible=true").count() == 17
    assert "17 answers are still missing" in page.locator("#form-error").text_content()
    # Typing 2 on another row rates that row only.
    third = page.locator("#candidates fieldset").nth(2)
    third.locator("input[type=radio]").nth(3).focus()
    page.keyboard.press("2")
    assert third.locator("input:checked").get_attribute("value") == "2"
    assert first_scale.locator("input:checked").get_attribute("value") == "4"

    # Rate the rest with the number keys, scrolling down to the last caption.
    scales = page.locator("#candidates fieldset")
    for index in range(scales.count()):
        scale = scales.nth(index)
        if scale.locator("input:checked").count():
            continue
        scale.locator("input[type=radio]").first.focus()
        page.keyboard.press("3")
    page.locator(".candidate").last.scroll_into_view_if_needed()
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    assert page.evaluate("window.scrollY") > 0
    # The video is still entirely in view after scrolling to the last caption.
    assert in_viewport(page, "#clip"), page.locator("#clip").bounding_box()
    assert in_viewport(page, "#watch-hint")
    assert page.locator(".field-error:visible").count() == 0
    assert page.locator("#form-error").text_content() == ""
    shoot(page, tmp_path, f"worker-scrolled-{viewport}")

    page.get_by_role("button", name="Submit", exact=True).click()
    page.get_by_role("heading", name="Thank you!").wait_for(timeout=15_000)
    assert page.locator("#completion-code").text_content() == "LEPUS-OK-7"
    values = sorted(
        (j.values["descriptiveness"], j.values["relevance"], j.values["fluency"])
        for j in Judgment.objects.all()
    )
    assert len(values) == 6 and (4, 3, 2) in values
    shoot(page, tmp_path, f"worker-done-{viewport}")


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_an_excluded_worker_gets_the_screen_out_page_with_the_code(
    live_server,
    browser,
    chromium,
    mp4_file,
    tmp_path,
    viewport,
):
    campaign = six_caption_campaign(
        mp4_file,
        clips=2,
        screen_out_code="SCREENED-9",
        screen_out_redirect_url="https://app.prolific.com/submissions/complete?cc=SCREENED-9",
    )
    page = browser.new_page()
    page.set_viewport_size(VIEWPORTS[viewport])
    url = f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID={PID}"
    start(page, url)
    held = Assignment.objects.get(status=AssignmentStatus.LIVE)

    # Quality control excludes the worker while they rate: their lease ends at once.
    participation = Participation.objects.get(worker__external_id=PID)
    worker_exclude(participation=participation, actor=None, reason="test")
    held.refresh_from_db()
    assert held.status == AssignmentStatus.EXPIRED
    assert set(
        CampaignCandidate.objects.filter(clip_id=held.clip_id).values_list("slots_taken", flat=True)
    ) == {0}

    # The worker comes back to the tab: the page asks, and shows the screen-out before any
    # rating (it also asks every 10 s during a clip's first 30 s, and a submit would answer it).
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")

    heading = page.get_by_role("heading", name="Your participation has ended")
    heading.wait_for(timeout=15_000)
    assert page.locator("#screened-out-code").text_content() == "SCREENED-9"
    assert page.locator("#screened-out-code").is_visible()
    assert "Prolific" in page.locator("#screened-out-instruction").text_content()
    link = page.get_by_role("link", name="Return to the study platform")
    assert link.get_attribute("href") == campaign.screen_out_redirect_url
    assert page.locator("#task").is_hidden()
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORTS[viewport]["width"]
    assert Judgment.objects.count() == 0
    assert Participation.objects.get().status == ParticipationStatus.EXCLUDED
    shoot(page, tmp_path, f"worker-screened-out-{viewport}")

    # Opening the study link again shows the screen-out page at once (no consent, no start).
    fresh = chromium.new_context(viewport=VIEWPORTS[viewport])
    again = fresh.new_page()
    again.goto(url)
    assert again.get_by_role("heading", name="Your participation has ended").is_visible()
    assert again.locator(".code").text_content() == "SCREENED-9"
    assert again.get_by_role("button", name="I agree — start").count() == 0
    assert again.evaluate("document.documentElement.scrollWidth") <= VIEWPORTS[viewport]["width"]
    shoot(again, tmp_path, f"worker-screened-out-entry-{viewport}")
    assert Assignment.objects.count() == 1
    fresh.close()
