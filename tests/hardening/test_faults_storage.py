"""Fault: S3 unreachable. Pages that show media never call S3 themselves (they hand out presigned
URLs), so they still answer, and the worker page tells the worker when a clip cannot be loaded;
jobs that write to S3 (video processing, release builds) are queued again and retried with an
exponential backoff on a real worker, and finish once S3 is back."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import boto3
import pytest

from annotation.models import Campaign
from common import storage
from common.models import JobStatus
from common.tasks import storage_retry_countdown
from datasets_app.models import Clip, VideoAttachJob
from datasets_app.services.video import video_attach_job_create, video_attach_job_publish
from export.models import Release
from export.services import release_build, release_create
from tests.annotation.crowd_factories import crowd_campaign, crowd_join
from tests.export.builders import build_campaign
from tests.factories import ClipFactory
from tests.support.processes import celery_worker, free_port, purge_broker, wait_until
from tests.support.storage import point_storage_at_s3


@pytest.mark.django_db(transaction=True)
def test_pages_that_show_media_answer_while_s3_is_unreachable(
    s3_storage, settings, client, curator
):
    data = build_campaign(slug="s3down", clips=6, workers=6)
    release = release_create(campaigns=[data.campaign], seed=1)
    release_build(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == JobStatus.SUCCEEDED
    crowd = crowd_campaign(slug="s3crowd", clips=2)
    Campaign.objects.filter(pk=crowd.pk).update(status="active")

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens on this loopback port
    point_storage_at_s3(settings, dead, s3_storage)
    with pytest.raises(Exception) as raised:
        storage.exists("anything")
    assert storage.is_unavailable(raised.value)

    client.force_login(curator)
    for path in ("/dashboard/datasets/", f"/dashboard/releases/{release.pk}/", "/dashboard/"):
        response = client.get(path)
        assert response.status_code == 200, path
    listed = client.get(f"/dashboard/releases/{release.pk}/").content.decode()
    assert all(relative in listed for relative in release.files)

    # The crowd API still hands out work: the URLs are signed locally, the browser fetches the
    # bytes (and worker.js says "The clip could not be loaded" when it cannot).
    token, _ = crowd_join(crowd, "s3down-worker")
    offered = client.post("/api/v1/worker/assignments/next", HTTP_AUTHORIZATION=f"Worker {token}")
    assert offered.status_code == 200, offered.content
    assert offered.json()["clip"]["video_url"].startswith(f"{dead}/{s3_storage}/clips/")
    page = client.get("/w/s3crowd/?PROLIFIC_PID=p1&STUDY_ID=s1&SESSION_ID=x1")
    assert page.status_code == 200
    script = (settings.BASE_DIR / "static" / "js" / "worker.js").read_text()
    assert "The clip could not be loaded. Please reload the page." in script


def test_the_retry_countdown_doubles_and_is_capped(settings):
    settings.LEPUS_STORAGE_RETRY_BACKOFF = 30
    settings.LEPUS_STORAGE_RETRY_BACKOFF_MAX = 200
    assert [storage_retry_countdown(n) for n in range(5)] == [30, 60, 120, 200, 200]


@pytest.fixture
def private_s3(settings, monkeypatch) -> Iterator[dict[str, object]]:  # type: ignore[no-untyped-def]
    """A moto S3 server of this test only, so the test can stop and restart it."""
    from moto.server import ThreadedMotoServer

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    bucket = f"lepus-faults-{uuid.uuid4().hex[:10]}"
    state: dict[str, object] = {"server": ThreadedMotoServer(ip_address="127.0.0.1", port=port)}

    def start() -> None:
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        state["server"] = server
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        if bucket not in {item["Name"] for item in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=bucket)

    def stop() -> None:
        state["server"].stop()  # type: ignore[attr-defined]

    start()
    point_storage_at_s3(settings, endpoint, bucket)
    state.update(start=start, stop=stop, endpoint=endpoint, bucket=bucket)
    try:
        yield state
    finally:
        stop()


@pytest.mark.slow
@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_video_and_release_jobs_retry_with_backoff_while_s3_is_down_and_finish_after(
    private_s3, settings, tmp_path
):
    clip = ClipFactory(vatex_id="s3retry0001_000000_000002", youtube_id="s3retry0001")
    from common import media

    media.synthesize_video(tmp_path / f"{clip.vatex_id}.mp4", duration=2, width=160, height=90)
    data = build_campaign(slug="s3retry", clips=6, workers=6)
    purge_broker()
    private_s3["stop"]()  # type: ignore[operator]

    retry_env = {
        "LEPUS_STORAGE_RETRY_BACKOFF": "1",
        "LEPUS_STORAGE_RETRIES": "8",
        "LEPUS_VIDEO_FRAMES": "2",
        # botocore's own retries of a refused connection add seconds to every attempt.
        "AWS_MAX_ATTEMPTS": "2",
    }
    with celery_worker(extra_env=retry_env) as worker:
        job, _ = video_attach_job_create(directory=tmp_path)
        assert job is not None
        video_attach_job_publish(job=job)
        release = release_create(campaigns=[data.campaign], seed=1)

        def retries_so_far(row: VideoAttachJob | Release) -> int:
            row.refresh_from_db()
            found = re.search(r"retry (\d+) of 8", row.error)
            return int(found.group(1)) if found else 0

        # Each job's message moves on with every try and the two jobs share one worker, so their
        # phases drift apart: wait until each has been retried at least twice, not for one
        # moment when both say "retry 2".
        def backed_off_twice() -> bool:
            log = worker.log()  # celery logs "Retry in Ns" just after the row says so
            return (
                retries_so_far(job) >= 2
                and retries_so_far(release) >= 2
                and bool(re.search(r"Retry in 1(\.0)?s", log))
                and bool(re.search(r"Retry in 2(\.0)?s", log))
            )

        wait_until(
            backed_off_twice,
            timeout=120,
            interval=0.2,
            message=lambda: (
                "two retries of each job"
                f" (video job: {job.status} {job.error[:200]!r};"
                f" release: {release.status} {release.error[:200]!r});"
                f" worker log:\n{worker.log()[-3000:]}"
            ),
        )
        # Between tries each job waits queued, with the reason, not stuck running.
        for row in (job, release):
            assert row.status in (JobStatus.QUEUED, JobStatus.RUNNING)
            assert "Storage unreachable" in row.error
        assert not Clip.objects.servable().exists()
        assert not Release.objects.published().exists()

        private_s3["start"]()  # type: ignore[operator]
        wait_until(
            lambda: (
                VideoAttachJob.objects.get(pk=job.pk).is_finished
                and Release.objects.get(pk=release.pk).is_finished
            ),
            timeout=90,
            interval=0.3,
            message=lambda: f"both jobs to finish; worker log:\n{worker.log()[-3000:]}",
        )
    job.refresh_from_db()
    release.refresh_from_db()
    assert (job.status, job.ready, job.failed, job.error) == (JobStatus.SUCCEEDED, 1, 0, "")
    assert job.attempts >= 3
    assert (release.status, release.error) == (JobStatus.SUCCEEDED, "")
    assert release.attempts >= 3
    assert list(Clip.objects.servable().values_list("pk", flat=True)) == [clip.pk]
    assert storage.exists(f"clips/{clip.vatex_id}/video.mp4")
    assert all(storage.exists(f"releases/{release.pk}/{relative}") for relative in release.files)
