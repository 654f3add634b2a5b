"""The curator's Data page: totals, clips by status, import batches, video jobs with progress, and
the retry of a failed video job."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from common.models import JobStatus
from datasets_app.models import ClipStatus, VideoAttachJob
from datasets_app.services.imports import candidates_import, vatex_import
from tests.datasets_app.helpers import EXAMPLES
from tests.factories import ClipFactory

pytestmark = pytest.mark.django_db

URL = "/dashboard/datasets/"


def test_the_url_names_resolve():
    assert reverse("annotation:data") == URL
    assert reverse("annotation:video-job-retry", args=[7]) == f"{URL}video-jobs/7/retry"


def test_only_curators_see_the_data_page(client, outsider):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    client.force_login(outsider)
    assert client.get(URL).status_code == 403


def test_the_page_shows_imports_clip_status_and_job_progress(curator_client, curator):
    vatex_import(path=EXAMPLES / "vatex.json", user=curator)
    candidates_import(path=EXAMPLES / "candidates.jsonl")
    ClipFactory(
        vatex_id="brokenclip1_000000_000004",
        status=ClipStatus.ERROR,
        error_reason="source video not found: <script>alert(1)</script>",
    )
    running = VideoAttachJob.objects.create(
        directory="/srv/videos", total=4, done=1, ready=1, status=JobStatus.RUNNING
    )
    failed = VideoAttachJob.objects.create(
        directory="/srv/other",
        total=2,
        done=2,
        failed=2,
        status=JobStatus.FAILED,
        error="worker lost",
    )

    response = curator_client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<td data-stat="clips">4</td>' in html
    assert '<td data-stat="candidates">5</td>' in html
    assert '<td data-status="pending">3</td>' in html
    assert '<td data-status="error">1</td>' in html
    assert f'<progress max="4" value="1" aria-label="Video job {running.pk} progress">' in html
    assert f'action="/dashboard/datasets/video-jobs/{failed.pk}/retry"' in html
    assert f'action="/dashboard/datasets/video-jobs/{running.pk}/retry"' not in html
    assert '<meta http-equiv="refresh" content="5">' in html  # a job runs: the page refreshes
    assert "vatex.json" in html and "candidates.jsonl" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html

    VideoAttachJob.objects.filter(pk=running.pk).update(status=JobStatus.SUCCEEDED)
    assert '<meta http-equiv="refresh"' not in curator_client.get(URL).content.decode()


def test_a_curator_retries_a_failed_job(
    curator_client, outsider, django_capture_on_commit_callbacks
):
    clip = ClipFactory(status=ClipStatus.PROCESSING, source_key="/srv/videos/x.mp4")
    job = VideoAttachJob.objects.create(
        directory="/srv/videos",
        total=1,
        clip_ids=[clip.pk],
        status=JobStatus.FAILED,
        error="worker lost",
    )
    retry = reverse("annotation:video-job-retry", args=[job.pk])

    stranger = Client()
    stranger.force_login(outsider)
    assert stranger.post(retry).status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED

    assert curator_client.get(retry).status_code == 405
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = curator_client.post(retry)
    assert response.status_code == 302
    assert len(callbacks) == 1  # the task is published once the transaction commits
    job.refresh_from_db()
    clip.refresh_from_db()
    assert (job.status, job.error, clip.status) == (JobStatus.QUEUED, "", ClipStatus.QUEUED)

    # A job that succeeded is not retried.
    VideoAttachJob.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    response = curator_client.post(retry, follow=True)
    assert "only failed, cancelled or queued jobs retry" in response.content.decode()
