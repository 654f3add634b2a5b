"""Review in Chromium at 1280×800 and 390×844 (issue 15, point 6): a resolve that misses a reason
comes back with every input kept and the message beside the reason field; the keyboard resolves
and opens the next open item; "Resolve and next" ends in the queue when nothing is left; the
overall question is shown once on the review page and the leaderboard; the audit log (page and
API) reads as sentences."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from annotation.models import (
    AuditEntry,
    Campaign,
    CampaignCandidate,
    Judgment,
    ReviewItem,
    ReviewStatus,
)
from annotation.quality.run import qc_campaign_full
from annotation.questions import overall_only_questions
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker
from tests.support.browser import chromium_browser
from tests.support.curator import curator_log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/work/shots/figures")
VIEWPORTS = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def _review_campaign(slug: str) -> tuple[Campaign, list[ReviewItem]]:
    """Two candidates rated by three workers far apart (ranges 4 and 3), so both enter review,
    the wider first; the campaign's only question is its overall question."""
    campaign = quality_crowd_campaign(
        slug=slug,
        clips=2,
        candidates_per_clip=1,
        quota=3,
        questions=overall_only_questions(),
        overall_question_key="overall",
        systems=("system-a",),
    )
    first, second = campaign.items.order_by("id")
    for index, (rating_first, rating_second) in enumerate(((1, 2), (5, 4), (3, 5))):
        worker = quality_worker(campaign, f"{slug}-w{index}")
        quality_judge(worker, first, {"overall": rating_first})
        quality_judge(worker, second, {"overall": rating_second})
    qc_campaign_full(campaign=campaign)
    items = list(ReviewItem.objects.filter(campaign=campaign).order_by("-priority", "id"))
    assert [item.campaign_candidate_id for item in items] == [first.pk, second.pk]
    return campaign, items


@pytest.fixture
def review_browser() -> Iterator[Any]:
    with chromium_browser() as browser:
        yield browser


def _no_horizontal_overflow(page: Any) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.parametrize("label", list(VIEWPORTS))
def test_the_review_form_keeps_inputs_resolves_and_moves_on_and_the_log_reads_as_sentences(
    live_server, review_browser, curator, label
):
    SHOTS.mkdir(parents=True, exist_ok=True)
    slug = f"review-{label}"
    campaign, (first, second) = _review_campaign(slug)
    base = f"{live_server.url}/dashboard/campaigns/{slug}"
    context = review_browser.new_context(viewport=VIEWPORTS[label])
    page = context.new_page()
    curator_log_in(page, f"{base}/review/")
    page.get_by_role("button", name="Review the next item").click()
    page.wait_for_url(f"{base}/review/{first.pk}/")

    # The overall question is the "Overall" row of the scores table, once.
    scores = page.get_by_role("table", name="Current scores")
    assert scores.locator("tr", has_text="Overall").count() == 1

    # A missing reason: the page comes back with every input as it was.
    outlier = Judgment.objects.get(
        campaign_candidate=first.campaign_candidate, values={"overall": 5}
    )
    page.get_by_label("Overall (final rating)").select_option("4")
    page.get_by_label(f"Exclude judgment {outlier.pk}").check()
    page.get_by_label("Note").fill("checked the clip twice")
    page.get_by_label("Drop this candidate from releases").check()
    page.get_by_role("button", name="Resolve", exact=True).click()
    error = page.locator(f"#reason_{outlier.pk}-error")
    error.wait_for()
    assert error.inner_text() == f"A reason is required to exclude judgment {outlier.pk}."
    reason_field = page.get_by_label(f"Reason for excluding judgment {outlier.pk}")
    assert reason_field.get_attribute("aria-invalid") == "true"
    field_box, error_box = reason_field.bounding_box(), error.bounding_box()
    assert 0 <= error_box["y"] - field_box["y"] < 60  # right under the field
    assert page.get_by_label("Overall (final rating)").input_value() == "4"
    assert page.get_by_label(f"Exclude judgment {outlier.pk}").is_checked()
    assert page.get_by_label("Note").input_value() == "checked the clip twice"
    assert page.get_by_label("Drop this candidate from releases").is_checked()
    page.screenshot(path=str(SHOTS / f"review-error-{label}.png"), full_page=True)
    assert _no_horizontal_overflow(page)
    first.refresh_from_db()
    outlier.refresh_from_db()
    assert first.status == ReviewStatus.CLAIMED and not outlier.is_excluded
    assert not CampaignCandidate.objects.get(pk=first.campaign_candidate_id).dropped
    assert not AuditEntry.objects.filter(campaign=campaign).exclude(action="claim").exists()

    # Untick drop, give the reason, and press "n" (outside a field): resolved, and the next one.
    page.get_by_label("Drop this candidate from releases").uncheck()
    reason_field.fill("about another clip")
    page.locator("h1").click()
    page.keyboard.press("n")
    page.wait_for_url(f"{base}/review/{second.pk}/")
    assert page.get_by_text(f"Item {first.pk} resolved; this is the next one.").is_visible()
    first.refresh_from_db()
    outlier.refresh_from_db()
    candidate = CampaignCandidate.objects.get(pk=first.campaign_candidate_id)
    assert first.status == ReviewStatus.RESOLVED and first.resolved_by == curator
    assert outlier.is_excluded and outlier.exclusion_reason == "about another clip"
    assert candidate.resolution == {"values": {"overall": 4.0}} and not candidate.dropped

    # Keys 1-5 set the final rating; "Resolve and next" with nothing left ends in the queue.
    page.locator("h1").click()
    page.keyboard.press("5")
    assert page.get_by_label("Overall (final rating)").input_value() == "5"
    page.screenshot(path=str(SHOTS / f"review-next-{label}.png"), full_page=True)
    page.get_by_role("button", name="Resolve and next").click()
    page.wait_for_url(f"{base}/review/")
    assert page.get_by_text(f"Item {second.pk} resolved. Nothing left to review.").is_visible()
    second.refresh_from_db()
    assert second.status == ReviewStatus.RESOLVED
    assert CampaignCandidate.objects.get(pk=second.campaign_candidate_id).resolution == {
        "values": {"overall": 5.0}
    }

    # The leaderboard names each column once.
    page.goto(f"{base}/leaderboard/")
    headers = page.locator("table.leaderboard thead th").all_inner_texts()
    assert headers == ["System", "Candidates", "Overall"]
    page.screenshot(path=str(SHOTS / f"leaderboard-{label}.png"), full_page=True)
    assert _no_horizontal_overflow(page)

    # The audit log in words, the same on the page and in the API.
    page.goto(f"{base}/audit/")
    page.screenshot(path=str(SHOTS / f"audit-{label}.png"), full_page=True)
    assert _no_horizontal_overflow(page)
    sentences = page.locator("td.sentence").all_inner_texts()
    first_candidate, second_candidate = first.campaign_candidate_id, second.campaign_candidate_id
    worker = outlier.participation.worker.external_id
    assert sorted(sentences) == sorted(
        [
            f"Review item {first.pk} claimed by curator; status open → claimed.",
            f"Judgment {outlier.pk} (worker {worker}) excluded by curator; kept → excluded; "
            "reason “about another clip”.",
            f"Final ratings of candidate {first_candidate} set by curator: Overall 4 (mean of "
            "kept judgments was Overall 3); status → resolved; note “checked the clip twice”.",
            f"Review item {second.pk} claimed by curator; status open → claimed.",
            f"Final ratings of candidate {second_candidate} set by curator: Overall 5 (mean of "
            "kept judgments was Overall 3.67); status → resolved.",
        ]
    )
    assert not any("{" in sentence for sentence in sentences)
    api = page.request.get(f"{live_server.url}/api/v1/campaigns/{slug}/audit").json()
    assert [entry["sentence"] for entry in api] == sentences
    context.close()
