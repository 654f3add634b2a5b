"""A curator resolves a review item in the dashboard, in Debian's Chromium (Playwright) against a
live server on PostgreSQL, and the candidate's aggregate changes accordingly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from annotation.models import AuditEntry, CampaignCandidate, ReviewItem, ReviewStatus
from annotation.quality.run import qc_campaign_full
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker
from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def quality_browser() -> Iterator[object]:
    with chromium_browser() as browser:
        yield browser


def test_a_curator_resolves_a_review_item_and_the_score_follows(
    live_server, quality_browser, curator
):
    campaign = quality_crowd_campaign(
        slug="browser-review", clips=1, candidates_per_clip=1, quota=3
    )
    item = campaign.items.get()
    for name, values in (("b-1", (1, 2, 3)), ("b-2", (5, 2, 3)), ("b-3", (3, 2, 4))):
        quality_judge(
            quality_worker(campaign, name),
            item,
            dict(zip(("descriptiveness", "relevance", "fluency"), values, strict=True)),
        )
    qc_campaign_full(campaign=campaign)
    review = ReviewItem.objects.get(campaign_candidate=item)
    item.refresh_from_db()
    assert item.means == {
        "descriptiveness": 3.0,
        "relevance": 2.0,
        "fluency": pytest.approx(10 / 3),
    }
    assert item.overall == pytest.approx((3 + 2 + 10 / 3) / 3)

    page = quality_browser.new_page()
    page.goto(f"{live_server.url}/dashboard/campaigns/browser-review/review/")
    # Not logged in: the login page, then back to the queue.
    page.get_by_label("Username").fill("curator")
    page.get_by_label("Password").fill("curator-password-1")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/dashboard/campaigns/browser-review/review/")
    page.get_by_role("button", name="Review the next item").click()
    page.wait_for_url(f"**/review/{review.pk}/")
    assert page.locator("#candidate-text").inner_text() == item.candidate.text
    assert page.locator("#overall").inner_text() == "2.778"

    page.get_by_label("Descriptiveness (final rating)").select_option("4")
    page.get_by_label("Relevance (final rating)").select_option("5")
    outlier = item.judgments.get(participation__worker__external_id="b-2")
    page.get_by_label(f"Exclude judgment {outlier.pk}").check()
    page.get_by_label(f"Reason for excluding judgment {outlier.pk}").fill("not about this clip")
    page.get_by_role("button", name="Resolve", exact=True).click()
    page.wait_for_selector("text=Resolved.")

    # The page shows the new score, and the database holds it.
    expected_fluency = 3.5  # the kept 3 and 4
    expected_overall = (4 + 5 + expected_fluency) / 3
    assert page.locator("#overall").inner_text() == f"{expected_overall:.3f}"
    assert page.locator("#mean-relevance").inner_text() == "5.00"
    item.refresh_from_db()
    assert item.means == {"descriptiveness": 4.0, "relevance": 5.0, "fluency": expected_fluency}
    assert item.overall == pytest.approx(expected_overall)
    assert item.normalized == pytest.approx((expected_overall - 1) / 4)
    assert item.training_class == 4
    assert item.is_finalised is True
    review.refresh_from_db()
    assert review.status == ReviewStatus.RESOLVED and review.resolved_by == curator
    assert set(AuditEntry.objects.filter(review_item=review).values_list("action", flat=True)) == {
        "claim",
        "exclude_judgment",
        "set_ratings",
    }

    # Undo the final ratings from the decisions table: back to the kept means.
    set_ratings = AuditEntry.objects.get(review_item=review, action="set_ratings")
    page.get_by_role("button", name=f"Undo Set final ratings candidate:{item.pk}").click()
    page.wait_for_selector("text=Undone: Set final ratings.")
    item.refresh_from_db()
    assert item.means == {"descriptiveness": 2.0, "relevance": 2.0, "fluency": expected_fluency}
    assert AuditEntry.objects.filter(undoes=set_ratings).exists()
    assert CampaignCandidate.objects.get(pk=item.pk).resolution == {}
    page.close()
