"""The Data page in Debian's Chromium (Playwright) against a live server: a curator logs in, sees
the imports, the clips by status and a video job's progress, and retries a failed job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from common.models import JobStatus
from datasets_app.models import ClipStatus, VideoAttachJob
from datasets_app.services.imports import vatex_import
from tests.datasets_app.helpers import EXAMPLES
from tests.factories import ClipFactory
from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page() -> Iterator[object]:
    with chromium_browser() as browser:
        yield browser.new_context().new_page()


def test_a_curator_follows_imports_and_video_jobs_and_retries_a_failed_one(
    live_server, page, curator
):
    vatex_import(path=EXAMPLES / "vatex.json", user=curator)
    clip = ClipFactory(
        vatex_id="brokenclip1_000000_000004",
        status=ClipStatus.ERROR,
        error_reason="source video not found: /srv/videos/brokenclip1.mp4",
    )
    job = VideoAttachJob.objects.create(
        directory="/srv/videos",
        total=3,
        done=2,
        ready=1,
        failed=1,
        clip_ids=[clip.pk],
        status=JobStatus.FAILED,
        error="The worker running this job stopped responding",
    )

    page.goto(f"{live_server.url}/dashboard/datasets/")
    page.fill("#id_username", "curator")
    page.fill("#id_password", "curator-password-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/dashboard/datasets/")

    assert page.locator("h1").inner_text() == "Data"
    assert page.locator('[data-stat="clips"]').inner_text() == "3"
    assert page.locator('[data-status="error"]').inner_text() == "1"
    row = page.locator(f'tr[data-job="{job.pk}"]')
    assert row.locator("progress").get_attribute("value") == "2"
    assert row.locator("progress").get_attribute("max") == "3"
    assert row.locator('[data-field="status"]').inner_text() == "Failed"
    assert "source video not found" in page.locator("#clip-errors + table").inner_text()
    assert "vatex.json" in page.locator("#imports + table").inner_text()

    row.get_by_role("button", name="Retry").click()
    page.wait_for_selector(".messages li.success")
    assert f"Video job {job.pk} is queued again." in page.locator(".messages").inner_text()
    assert page.locator(f'tr[data-job="{job.pk}"] [data-field="status"]').inner_text() == "Queued"
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
