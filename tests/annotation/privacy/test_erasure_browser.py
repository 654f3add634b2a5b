"""Erasure from the pages, in Debian's Chromium (Playwright) against a live server on PostgreSQL, at
1280×800 and 390×844: a worker from the end screen (link → confirmation → done), and a curator from
the worker page (a confirmation box, then the workers table). Screenshots go to
/work/shots/erasure/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from annotation.models import AuditEntry, Judgment, Participation, ReviewAction, Worker
from tests.annotation.crowd_factories import crowd_campaign
from tests.annotation.quality.factories import quality_judge, quality_worker
from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/work/shots/erasure")
VIEWPORTS = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
PERSON = "5e7a11ce0ddba11f00d5eee1"


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    with chromium_browser() as launched:
        yield launched


def _shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _fits(page) -> bool:  # type: ignore[no-untyped-def]
    """Nothing wider than the viewport (no sideways scrolling of the page)."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def _full_campaign(slug: str, **options):  # type: ignore[no-untyped-def]
    """One clip of two candidates, both already judged by someone else: a newcomer gets no work
    and lands on the end screen at once."""
    campaign = crowd_campaign(
        slug=slug, clips=1, candidates_per_clip=2, judgments_per_candidate=1, **options
    )
    other = quality_worker(campaign, "someone-else")
    for item in campaign.items.all():
        quality_judge(other, item, dict.fromkeys(campaign.question_keys, 4))
    return campaign


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_a_worker_erases_their_data_from_the_end_screen(live_server, chromium, viewport):
    campaign = _full_campaign(f"erase-page-{viewport}")
    context = chromium.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    page.goto(f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID={PERSON}&SESSION_ID=s-{viewport}")
    consent = page.locator("#erasure-consent")
    assert "your ratings are deleted" in " ".join(consent.inner_text().split())
    page.get_by_role("button", name="I agree — start").click()
    page.get_by_role("heading", name="Thank you!").wait_for(timeout=15_000)
    link = page.get_by_role("link", name="Erase my data from this study")
    assert link.is_visible() and _fits(page)
    _shot(page, f"worker-end-screen-{viewport}")
    # The person's data: two judgments with reasons (made here: the campaign had no work left).
    person = Participation.objects.get(worker__external_id=PERSON)
    for item in campaign.items.all():
        judgment = quality_judge(
            person, item, dict.fromkeys(campaign.question_keys, 1), take_slot=False
        )
        Judgment.objects.filter(pk=judgment.pk).update(reason="dull caption")

    link.click()
    page.wait_for_url(f"**/w/{campaign.slug}/erase/")
    page.get_by_role("heading", name="Erase my data").wait_for()
    assert page.get_by_text("Your ratings in this study will be deleted").is_visible()
    assert _fits(page)
    _shot(page, f"worker-erase-confirm-{viewport}")
    page.get_by_role("button", name="Erase my data").click()
    page.get_by_role("heading", name="Your data has been erased").wait_for(timeout=15_000)
    summary = page.locator("#erase-summary").inner_text()
    assert summary == (
        "2 of your ratings were deleted; 2 texts you typed were deleted, and this study no longer "
        "holds your participant id."
    )
    assert _fits(page)
    _shot(page, f"worker-erase-done-{viewport}")
    assert not Worker.objects.filter(external_id=PERSON).exists()
    assert Judgment.objects.filter(campaign=campaign).count() == 2  # someone else's
    assert not Judgment.objects.exclude(reason="").exists()
    entry = AuditEntry.objects.get(action=ReviewAction.ERASE_PARTICIPANT)
    assert entry.after["judgments_deleted"] == 2 and entry.after["requested_by"] == "worker"
    assert page.evaluate("window.sessionStorage.length") == 0  # the token is gone from the tab

    # Without a session in the tab the page says what else to do.
    stranger = chromium.new_context(viewport=VIEWPORTS[viewport]).new_page()
    stranger.goto(f"{live_server.url}/w/{campaign.slug}/erase/")
    stranger.get_by_role("heading", name="We cannot tell who you are here").wait_for()
    assert not stranger.get_by_role("button", name="Erase my data").is_visible()
    _shot(stranger, f"worker-erase-no-session-{viewport}")
    stranger.context.close()
    context.close()


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_a_curator_erases_a_participant_from_the_worker_page(
    live_server, chromium, curator, viewport
):
    campaign = _full_campaign(f"curator-erase-{viewport}", erasure_mode="pseudonymise")
    person = quality_worker(campaign, PERSON)
    kept = quality_judge(
        person, campaign.items.first(), dict.fromkeys(campaign.question_keys, 2), take_slot=False
    )
    Judgment.objects.filter(pk=kept.pk).update(reason="my reason")
    context = chromium.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    detail = f"{live_server.url}/dashboard/campaigns/{campaign.slug}/workers/{person.pk}/"
    page.goto(detail)
    page.get_by_label("Username").fill("curator")
    page.get_by_label("Password").fill("curator-password-1")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**/workers/{person.pk}/")
    card = page.locator("section.erase")
    assert "their judgments are kept under a random pseudonym" in " ".join(
        card.inner_text().split()
    )
    assert _fits(page)
    card.scroll_into_view_if_needed()
    _shot(page, f"curator-worker-erase-{viewport}")

    # Without the box ticked the browser does not send the form.
    page.get_by_role("button", name="Erase participant").click()
    assert page.url == detail
    assert Worker.objects.filter(external_id=PERSON).exists()
    page.get_by_label("I understand: erase this participant for good").check()
    page.get_by_role("button", name="Erase participant").click()
    page.wait_for_url(f"**/dashboard/campaigns/{campaign.slug}/workers/")
    message = page.get_by_text("The participant was erased from 1 campaign(s)")
    assert message.inner_text() == (
        "The participant was erased from 1 campaign(s): 0 judgment(s) deleted, 1 kept under a "
        "pseudonym, 1 free-text reason(s) erased."
    )
    assert PERSON not in page.content()
    _shot(page, f"curator-workers-after-erase-{viewport}")
    assert not Worker.objects.filter(external_id=PERSON).exists()
    kept.refresh_from_db()
    assert kept.reason == "" and kept.participation.worker.platform == "erased"
    entry = AuditEntry.objects.get(action=ReviewAction.ERASE_PARTICIPANT)
    assert entry.actor == curator and entry.target == f"worker:{person.pk}"
    context.close()
