"""The data browser and the preview as a worker in Debian's Chromium (Playwright) against a live
server, at 1280×800 and 390×844: a curator goes from the campaign's pages into the tables, pages,
filters, opens a candidate, its clip (a real MP4 that plays) and a worker; and goes through a whole
preview of a campaign, after which no table holds a row more or less. Screenshots land in
/work/shots/browser/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from annotation.models import CampaignCandidate, Judgment, ReviewItem
from annotation.quality.aggregation import aggregation_recompute
from common import storage
from tests.annotation.crowd import test_worker_page_browser as worker_page_tests
from tests.annotation.crowd.test_preview import row_counts
from tests.annotation.curation.test_data_browser import browse_world
from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/work/shots/browser")
# The rating page's tests make the MP4 and the campaign of real clips; the same ones here.
mp4_file = worker_page_tests.mp4_file
make_campaign = worker_page_tests.make_campaign
SIZES = {"wide": (1280, 800), "phone": (390, 844)}


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with chromium_browser() as launched:
        yield launched


def logged_in_page(chromium: Any, live_server: Any, size: str, path: str) -> Any:
    width, height = SIZES[size]
    page = chromium.new_context(viewport={"width": width, "height": height}).new_page()
    page.goto(f"{live_server.url}{path}")
    page.fill("#id_username", "curator")
    page.fill("#id_password", "curator-password-1")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(live_server.url + path.split("?")[0]) + ".*"))
    return page


def check_fits(page: Any, name: str, size: str) -> None:
    """Nothing overflows the viewport; wide tables scroll inside their card. Screenshot."""
    page.screenshot(path=str(SHOTS / f"{name}-{size}.png"), full_page=True)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{name} at {size}: the page is {overflow}px wider than the viewport"


def ids(page: Any, attribute: str) -> list[int]:
    return [
        int(value)
        for value in page.eval_on_selector_all(
            f"[data-{attribute}]", f"rows => rows.map(row => row.dataset.{attribute})"
        )
    ]


@pytest.mark.parametrize("size", ["wide", "phone"])
def test_a_curator_browses_from_the_campaign_into_candidates_clips_and_workers(
    live_server, chromium, curator, mp4_file, size
):
    world = browse_world(curator)
    campaign = world["campaign"]
    first_clip = world["items"][0].clip
    storage.put_file(first_clip.video_key, mp4_file)
    storage.put_file(first_clip.poster_key, mp4_file.with_suffix(".jpg"))
    aggregation_recompute(campaign=campaign)
    review = ReviewItem.objects.create(
        campaign=campaign, campaign_candidate=world["items"][0], rating_range=4
    )

    # From the campaign's overview, its Data link opens its candidates, best first on request.
    page = logged_in_page(chromium, live_server, size, f"/dashboard/campaigns/{campaign.slug}/")
    page.click("[data-browse-campaign]")
    page.wait_for_selector("h1:has-text('Candidates')")
    expected = list(
        CampaignCandidate.objects.filter(campaign=campaign)
        .order_by("-pk")
        .values_list("pk", flat=True)
    )
    assert ids(page, "candidate") == expected
    page.get_by_role("link", name="Overall").click()
    page.wait_for_url(re.compile(r".*sort=overall.*"))
    by_overall = sorted(
        CampaignCandidate.objects.filter(campaign=campaign), key=lambda i: (i.overall, i.pk)
    )[::-1]
    assert ids(page, "candidate") == [item.pk for item in by_overall]
    best = by_overall[0]
    assert page.locator(f'tr[data-candidate="{best.pk}"] [data-field="overall"]').inner_text() == (
        f"{best.overall:.2f}"
    )
    check_fits(page, "candidates", size)

    # Judgments: 25 a page, the second page follows; filtered to one worker's excluded ones.
    page.goto(f"{live_server.url}/dashboard/datasets/judgments/?size=25")
    newest = list(Judgment.objects.order_by("-pk").values_list("pk", flat=True))
    assert ids(page, "judgment") == newest[:25]
    check_fits(page, "judgments", size)
    page.get_by_role("link", name="Next page »").click()
    page.wait_for_url(re.compile(r".*after=.*"))
    assert ids(page, "judgment") == newest[25:36]
    assert page.get_by_role("link", name="Next page »").count() == 0
    page.fill("#id_worker", "w-spam")
    page.select_option("#id_state", "excluded")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r".*worker=w-spam.*"))
    spam = world["participations"][3]
    assert ids(page, "judgment") == list(
        spam.judgments.filter(is_excluded=True).order_by("-pk").values_list("pk", flat=True)
    )
    assert len(ids(page, "judgment")) == 9

    # A judgment opens its candidate: every judgment, the excluded one marked, the history.
    judgment_id = ids(page, "judgment")[0]
    page.locator(f'tr[data-judgment="{judgment_id}"] td a').first.click()
    page.wait_for_selector("h1:has-text('Candidate')")
    judgment = Judgment.objects.get(pk=judgment_id)
    item = judgment.campaign_candidate
    assert ids(page, "judgment") == list(
        item.judgments.order_by("created_at", "pk").values_list("pk", flat=True)
    )
    assert "Excluded" in page.locator(f"#judgment-{judgment_id}").inner_text()
    assert page.locator("[data-exclusion]").count() == 1
    assert page.locator('[data-field="kept_judgments"]').inner_text() == str(
        item.judgments.filter(is_excluded=False).count()
    )
    check_fits(page, "candidate", size)

    # Its clip: the video plays, the references and candidates are listed.
    page.goto(f"{live_server.url}/dashboard/datasets/clips/{first_clip.pk}/")
    page.wait_for_function("document.querySelector('video.clip-video').readyState >= 2")
    assert page.locator("[data-reference]").count() == first_clip.references.count()
    assert page.locator("[data-caption]").count() == first_clip.candidates.count()
    check_fits(page, "clip", size)

    # The worker's page: judgments (links to candidates), the exclusion with its rules.
    page.goto(f"{live_server.url}/dashboard/datasets/workers/?status=excluded")
    assert ids(page, "participation") == [spam.pk]
    assert page.locator('[data-field="judgments"]').inner_text() == "9"
    check_fits(page, "workers", size)
    page.get_by_role("link", name="w-spam").click()
    page.wait_for_selector("#judgments-heading")
    assert len(ids(page, "judgment")) == 9
    assert page.locator("[data-exclusion]").count() == 1
    check_fits(page, "worker", size)

    # The clips table, and the links from the review item and the leaderboard.
    page.goto(f"{live_server.url}/dashboard/datasets/clips/?campaign={campaign.slug}")
    assert len(ids(page, "clip")) == 3
    check_fits(page, "clips", size)
    page.goto(f"{live_server.url}/dashboard/campaigns/{campaign.slug}/review/{review.pk}/")
    page.click("[data-browse-candidate]")
    page.wait_for_url(re.compile(rf".*/datasets/candidates/{review.campaign_candidate_id}/"))
    page.goto(f"{live_server.url}/dashboard/campaigns/{campaign.slug}/leaderboard/")
    page.locator("[data-browse-system]").first.click()
    page.wait_for_selector("h1:has-text('Candidates')")
    assert sorted(ids(page, "candidate")) == sorted(
        CampaignCandidate.objects.filter(campaign=campaign).values_list("pk", flat=True)
    )


@pytest.mark.parametrize("size", ["wide", "phone"])
def test_a_curator_previews_a_campaign_as_a_worker_and_nothing_is_stored(
    live_server, chromium, curator, mp4_file, size
):
    campaign, _clips = make_campaign(mp4_file, clips=2, reason_required_at_or_below=1)
    before = row_counts()
    page = logged_in_page(chromium, live_server, size, f"/dashboard/campaigns/{campaign.slug}/")
    page.click("[data-preview-link]")
    page.wait_for_selector("[data-preview-banner]")
    assert "Preview — nothing is stored" in page.locator("[data-preview-banner]").inner_text()
    check_fits(page, "preview-consent", size)
    page.get_by_role("button", name="I agree — start").click()
    for number in (1, 2):
        # (No wait_for_function here: the worker page's CSP forbids evaluating strings.)
        page.locator("#progress-label", has_text=f"Clip {number} of").wait_for()
        assert page.locator("#candidates fieldset[disabled]").count() == 6
        page.get_by_role("button", name="Play clip").click()
        page.get_by_text("Ratings unlocked: rate every caption").wait_for(timeout=15_000)
        for radio in page.get_by_role("radio", name=re.compile(r": 4 — ")).all():
            radio.check()
        if number == 1:
            check_fits(page, "preview-rating", size)
        page.get_by_role("button", name="Submit", exact=True).click()
    page.get_by_role("heading", name="Thank you!").wait_for()
    assert page.locator("#completion-code").inner_text() == "LEPUS-OK-7"
    assert "You have rated 2 clips" in page.locator("#done-message").inner_text()
    check_fits(page, "preview-done", size)
    assert row_counts() == before
