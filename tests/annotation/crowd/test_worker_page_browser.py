"""The rating page in Debian's Chromium (Playwright), against a live server on PostgreSQL, with
real H.264/AAC MP4 clips made by ffmpeg and served through signed local-storage URLs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from annotation.crowd.services.campaigns import campaign_create
from annotation.models import Assignment, AssignmentStatus, Judgment, Participation
from common import storage
from datasets_app.models import CandidateCaption
from tests.annotation.crowd_factories import ready_clip
from tests.factories import CandidateFactory, SystemFactory
from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE_CAPTION = '<img src=x onerror="window.pwned=1"> a <b>bold</b> man & a dog'


@pytest.fixture(scope="module")
def mp4_file(tmp_path_factory) -> Path:
    """A 1.5 s H.264/AAC MP4 with faststart, as the video pipeline makes them."""
    target = tmp_path_factory.mktemp("videos") / "clip.mp4"
    subprocess.run(
        [
            "ffmpeg", "-loglevel", "error", "-y",
            "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25",
            "-f", "lavfi", "-i", "sine=frequency=440",
            "-t", "1.5", "-c:v", "libx264", "-pix_fmt", "yuv420p",
            "-c:a", "aac", "-movflags", "+faststart", str(target),
        ],
        check=True,
        timeout=60,
    )  # fmt: skip
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y", "-i", str(target), "-frames:v", "1",
         str(target.with_suffix(".jpg"))],
        check=True,
        timeout=60,
    )  # fmt: skip
    return target


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    # Playwright's sync API keeps an event loop in this thread for the whole module; the ORM
    # calls of the tests (and the database flush between them) are still plain synchronous code.
    with chromium_browser() as launched:
        yield launched


@pytest.fixture
def browser(chromium) -> Iterator[object]:
    """A fresh browser context per test (its own sessionStorage)."""
    context = chromium.new_context()
    try:
        yield context
    finally:
        context.close()


def make_campaign(mp4_file: Path, *, clips: int, slug: str = "pilot", **options):
    captioner = SystemFactory(name="browser-captioner", version="1")
    made = []
    for index in range(clips):
        clip = ready_clip()
        storage.put_file(clip.video_key, mp4_file)
        storage.put_file(clip.poster_key, mp4_file.with_suffix(".jpg"))
        CandidateFactory(clip=clip, system=captioner, position=0, text=f"clip {index}: a man sings")
        CandidateFactory(clip=clip, system=captioner, position=1, text=HOSTILE_CAPTION)
        made.append(clip)
    campaign = campaign_create(
        slug=slug,
        name="Caption quality pilot",
        judgments_per_candidate=1,
        clip_vatex_ids=[clip.vatex_id for clip in made],
        completion_code="LEPUS-OK-7",
        **options,
    )
    return campaign, made


def focused_is(locator) -> bool:
    return bool(locator.evaluate("element => element === document.activeElement"))


def tab_to(page, locator, *, limit: int = 60) -> None:
    """Press Tab until `locator` has the keyboard focus."""
    for _ in range(limit):
        if focused_is(locator):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"could not reach {locator} with the Tab key")


def rate_current_clip_with_keyboard(page, value: str) -> None:
    page.get_by_text("Ratings unlocked: rate every caption").wait_for(timeout=15_000)
    scales = page.locator("#candidates fieldset")
    for index in range(scales.count()):
        first_radio = scales.nth(index).locator("input[type=radio]").first
        tab_to(page, first_radio)
        page.keyboard.press(value)
    tab_to(page, page.get_by_role("button", name="Submit", exact=True))
    page.keyboard.press("Enter")


def test_a_new_prolific_worker_rates_with_the_keyboard_and_gets_the_code(
    live_server, browser, chromium, mp4_file
):
    campaign, clips = make_campaign(mp4_file, clips=3)
    page_a = browser.new_page()
    page_a.goto(
        f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID=5f00000000000000000000aa"
        "&STUDY_ID=study-77&SESSION_ID=session-1"
    )

    # Consent and instructions with the rubric, then start, all from the keyboard.
    assert page_a.get_by_role("heading", name="Caption quality pilot").is_visible()
    # Each question's own rating guide (the per-criterion rubric): three tables.
    assert page_a.get_by_role("row", name="4 — Good").count() == 3
    assert page_a.get_by_role("row", name="4 — Good").first.is_visible()
    start = page_a.get_by_role("button", name="I agree — start")
    tab_to(page_a, start)
    page_a.keyboard.press("Enter")

    # Clip 1: locked until the clip has played through.
    page_a.locator("#candidates fieldset").first.wait_for()
    play = page_a.get_by_role("button", name="Play clip")
    assert page_a.locator("#candidates fieldset[disabled]").count() == 6
    assert focused_is(play)
    assert page_a.get_by_role("radio", name="Relevance: 4 — Good").count() == 2
    # Captions are shown as text, never as markup.
    hostile = page_a.locator(".caption", has_text="bold")
    assert hostile.text_content() == HOSTILE_CAPTION
    assert page_a.locator("#candidates img, #candidates b").count() == 0
    assert page_a.evaluate("window.pwned === undefined")
    assert page_a.locator("#references li").count() == 2
    page_a.keyboard.press("Enter")  # play
    rate_current_clip_with_keyboard(page_a, "4")

    # The page moves on to clip 2 (A holds its lease now).
    page_a.get_by_role("button", name="Play clip").wait_for()
    page_a.wait_for_function(
        "document.getElementById('progress-label').textContent.startsWith('Clip 2')"
    )
    first = Assignment.objects.get(
        participation__worker__external_id="5f00000000000000000000aa",
        status=AssignmentStatus.SUBMITTED,
    )
    assert first.clip_id == clips[0].pk
    judged = Judgment.objects.filter(assignment=first)
    assert sorted(j.values["relevance"] for j in judged) == [4, 4]
    assert {j.values["descriptiveness"] for j in judged} == {4}
    assert first.client_video_played_ms >= 1000
    assert first.client_active_ms > 0
    assert first.server_ms > 0
    assert Participation.objects.get(
        worker__external_id="5f00000000000000000000aa"
    ).platform_data == {
        "study_id": "study-77",
        "session_id": "session-1",
    }

    # A second worker is never shown a clip the first one filled (nor the one A holds).
    context_b = chromium.new_context()
    page_b = context_b.new_page()
    page_b.goto(f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID=5f00000000000000000000bb")
    page_b.get_by_role("button", name="I agree — start").click()
    page_b.locator("#candidates fieldset").first.wait_for()
    page_b.get_by_role("button", name="Play clip").click()
    page_b.get_by_text("Ratings unlocked: rate every caption").wait_for(timeout=15_000)
    shown_to_b = page_b.evaluate("document.getElementById('clip').getAttribute('src')")
    assert clips[2].video_key in shown_to_b
    for radio in page_b.get_by_role("radio", name="Fluency: 5 — Excellent").all():
        radio.check()
    for radio in page_b.get_by_role("radio", name="Relevance: 3 — Fair").all():
        radio.check()
    for radio in page_b.get_by_role("radio", name="Descriptiveness: 2 — Poor").all():
        radio.check()
    page_b.get_by_role("button", name="Submit", exact=True).click()
    page_b.get_by_role("heading", name="Thank you!").wait_for(timeout=15_000)
    assert set(
        Assignment.objects.filter(
            participation__worker__external_id="5f00000000000000000000bb"
        ).values_list("clip_id", flat=True)
    ) == {clips[2].pk}

    # A finishes clip 2 and sees the completion code.
    page_a.keyboard.press("Enter")  # focus is back on "Play clip"
    rate_current_clip_with_keyboard(page_a, "5")
    page_a.get_by_role("heading", name="Thank you!").wait_for(timeout=15_000)
    assert page_a.locator("#completion-code").text_content() == "LEPUS-OK-7"
    assert page_a.get_by_text("You have rated 2 clips").is_visible()
    assert set(
        Assignment.objects.filter(
            participation__worker__external_id="5f00000000000000000000aa"
        ).values_list("clip_id", flat=True)
    ) == {clips[0].pk, clips[1].pk}
    assert Judgment.objects.count() == 6
    context_b.close()


def test_scales_wait_for_the_minimum_time_and_a_reload_resumes_the_same_clip(
    live_server, browser, mp4_file
):
    campaign, _clips = make_campaign(
        mp4_file, clips=1, slug="slow", min_seconds_on_clip=4, reason_required_at_or_below=2
    )
    page = browser.new_page()
    url = f"{live_server.url}/w/{campaign.slug}/?workerId=A1TESTWORKER&assignmentId=ASSIGN1&hitId=HIT1"
    page.goto(url)
    page.get_by_role("button", name="I agree — start").click()
    page.locator("#candidates fieldset").first.wait_for()
    page.get_by_role("button", name="Play clip").click()
    page.get_by_role("button", name="Play again").wait_for(timeout=10_000)  # the clip ended
    # Ended after ~1.5 s, but the campaign asks for 4 s on the clip.
    assert page.locator("#candidates fieldset[disabled]").count() == 6

    page.reload()  # the token is in sessionStorage: no consent again, the same live clip
    page.locator("#candidates fieldset").first.wait_for()
    page.get_by_role("button", name="Play clip").click()
    page.get_by_text("Ratings unlocked: rate every caption").wait_for(timeout=15_000)
    assert Assignment.objects.count() == 1
    for radio in page.get_by_role("radio", name="Fluency: 1 — Bad").all():
        radio.check()
    for radio in page.get_by_role("radio", name="Relevance: 3 — Fair").all():
        radio.check()
    for radio in page.get_by_role("radio", name="Descriptiveness: 3 — Fair").all():
        radio.check()
    page.get_by_role("button", name="Submit", exact=True).click()
    # A rating of 1 needs a reason: the page asks for it, at each reason box, before sending.
    assert "2 answers are missing" in page.locator("#form-error").text_content()
    for number in (1, 2):
        assert page.locator(f"#err-reason-{number}").text_content() == (
            "Say briefly why the rating is low."
        )
    assert Judgment.objects.count() == 0
    page.get_by_label("Caption 1: why the low rating? (required)").fill("Broken grammar.")
    page.get_by_label("Caption 2: why the low rating? (required)").fill("Not English.")
    page.get_by_role("button", name="Submit", exact=True).click()
    page.get_by_role("heading", name="Thank you!").wait_for(timeout=15_000)
    assert sorted(Judgment.objects.values_list("reason", flat=True)) == [
        "Broken grammar.",
        "Not English.",
    ]
    participation = Participation.objects.get()
    assert participation.worker.platform == "mturk"
    assert participation.platform_data == {"assignment_id": "ASSIGN1", "hit_id": "HIT1"}
    assert CandidateCaption.objects.count() == 2
