"""Markup in captions, references, reasons, names and notes is shown as text on every page that
shows it: Debian's Chromium (Playwright) visits the rating page and the curator's pages against a
live server on PostgreSQL, and no script runs, no dialog opens, no injected element exists, and
the literal text is on the page. The JSON API hands the same text back verbatim (not escaped
twice): escaping is the page's job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import Client

from annotation.models import CampaignCandidate, Judgment, Participation, Worker
from datasets_app.models import (
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ImportKind,
    ReferenceCaption,
)
from export.models import Release
from tests.hardening.world import World, build_world, worker_client
from tests.support.browser import chromium_browser
from training_bridge.models import TrainingRun

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=1;alert(1)">'


@pytest.fixture
def chromium() -> Iterator[object]:
    with chromium_browser() as browser:
        yield browser


def _poison(world: World) -> None:
    """Hostile text in every field a page shows."""
    campaign = world.campaign
    campaign.name = f"Campaign {XSS}"
    campaign.description = f"About {XSS}"
    campaign.instructions = f"Instructions {XSS}"
    campaign.save()
    clip_ids = CampaignCandidate.objects.filter(campaign=campaign).values("clip_id")
    CandidateCaption.objects.filter(clip_id__in=clip_ids).update(text=f"caption {XSS}")
    ReferenceCaption.objects.filter(clip_id__in=clip_ids).update(text=f"reference {XSS}")
    CaptioningSystem.objects.update(name=f"system {XSS}")
    Judgment.objects.update(reason=f"reason {XSS}")
    Worker.objects.filter(participations__pk=world.participation_a.pk).update(
        external_id=f"worker {XSS}"
    )
    world.audit_entry.note = f"note {XSS}"
    world.audit_entry.save()
    world.qc_run.status = "failed"
    world.qc_run.error = f"qc error {XSS}"
    world.qc_run.save()
    Release.objects.filter(pk=world.release.pk).update(name=f"release {XSS}")
    Release.objects.filter(pk=world.other_release.pk).update(name=f"other {XSS}")
    failed = Release.objects.create(
        name=f"failed {XSS}", ratios=[0.8, 0.2], status="failed", error=f"release error {XSS}"
    )
    failed.campaigns.set([campaign])
    TrainingRun.objects.filter(pk=world.training_run.pk).update(
        name=f"run {XSS}", status="failed", error=f"run error {XSS}"
    )
    world.video_job.error = f"job error {XSS}"
    world.video_job.save()
    Clip.objects.filter(pk__in=clip_ids[:1]).update(status="error", error_reason=f"clip {XSS}")
    ImportBatch.objects.create(
        kind=ImportKind.VATEX, file_name=f"import {XSS}.json", sha256="0" * 64
    )


def _assert_inert(page, url: str, dialogs: list[str], *, shows: bool) -> None:  # type: ignore[no-untyped-def]
    response = page.goto(url)
    assert response is not None and response.status == 200, url
    page.wait_for_load_state("load")
    assert page.evaluate("window.__xss") is None, url
    assert page.locator('img[src="x"]').count() == 0, url
    assert page.evaluate("document.querySelectorAll('body script:not([src])').length") <= 1, url
    if shows:
        assert XSS in page.locator("body").inner_text(), url
    assert dialogs == [], url


def test_hostile_text_is_inert_and_visible_on_every_page(
    live_server, chromium, curator, admin_user, outsider
):
    world = build_world(curator=curator, admin=admin_user, outsider=outsider)
    _poison(world)
    slug = world.campaign.slug
    session = Client()
    session.force_login(curator)
    context = chromium.new_context()
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
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    base = f"{live_server.url}/dashboard/campaigns/{slug}"
    pages = {
        f"{live_server.url}/dashboard/": True,
        f"{base}/": True,
        f"{base}/edit/": True,
        f"{base}/links/": True,
        f"{base}/workers/": True,
        f"{base}/review/": True,
        f"{base}/review/{world.review_item.pk}/": True,
        f"{base}/audit/": True,
        f"{base}/leaderboard/": False,  # no aggregates yet, so no system rows
        f"{live_server.url}/dashboard/datasets/": True,
        f"{live_server.url}/dashboard/releases/": True,
        f"{live_server.url}/dashboard/releases/{world.release.pk}/": True,
        f"{live_server.url}/dashboard/releases/{world.release.pk}/compare/"
        f"{world.other_release.pk}/": False,  # these releases hold no rows to show
        f"{live_server.url}/dashboard/training/": True,
        f"{live_server.url}/dashboard/training/{world.training_run.pk}/": True,
        f"{live_server.url}/dashboard/training/compare/?run={world.training_run.pk}": True,
    }
    for url, shows in pages.items():
        _assert_inert(page, url, dialogs, shows=shows)

    # The rating page: a new worker whose participant id is itself hostile.
    worker_page = context.new_page()
    worker_page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    worker_page.goto(f"{live_server.url}/w/{slug}/?PROLIFIC_PID=p-{XSS}")
    assert XSS in worker_page.locator("body").inner_text()  # campaign name and instructions
    worker_page.get_by_role("button", name="I agree — start").click()
    worker_page.locator("#candidates fieldset").first.wait_for()
    captions = worker_page.locator("#candidates .caption").all_inner_texts()
    references = worker_page.locator("#references li").all_inner_texts()
    assert captions and set(captions) == {f"caption {XSS}"}
    assert references and set(references) == {f"reference {XSS}"}
    assert worker_page.evaluate("window.__xss") is None
    assert worker_page.locator('img[src="x"]').count() == 0
    assert dialogs == []
    joined = Participation.objects.get(worker__external_id=f"p-{XSS}")
    assert joined.campaign_id == world.campaign.pk
    context.close()


def test_the_api_returns_hostile_text_verbatim(curator, admin_user, outsider):
    world = build_world(curator=curator, admin=admin_user, outsider=outsider)
    _poison(world)
    client = Client()
    client.force_login(curator)

    offer = worker_client(world.token_b).post("/api/v1/worker/assignments/next").json()
    review = client.get(
        f"/api/v1/campaigns/{world.campaign.slug}/review/{world.review_item.pk}"
    ).json()
    campaign = client.get(f"/api/v1/campaigns/{world.campaign.slug}/").json()
    releases = client.get("/api/v1/releases/?status=all").json()

    assert {candidate["text"] for candidate in offer["candidates"]} == {f"caption {XSS}"}
    assert set(offer["references"]) == {f"reference {XSS}"}
    assert set(review["references"]) == {f"reference {XSS}"}
    assert [entry["note"] for entry in review["audit"]] == [f"note {XSS}"]
    assert campaign["name"] == f"Campaign {XSS}"
    assert f"release {XSS}" in {release["name"] for release in releases}
