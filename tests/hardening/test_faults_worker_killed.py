"""Fault: the Celery worker is killed (SIGKILL) in the middle of a video job, with real ffmpeg and
S3 on loopback. The job is not left running (the reaper fails it), the clip being processed is
never served half-uploaded, and a re-run finishes every clip.

The same fault for a release build and a training run is covered by
`tests/export/test_release_jobs.py::test_a_build_killed_mid_way_publishes_nothing_and_a_rerun_succeeds`
and `tests/training_bridge/test_training_worker.py::test_a_killed_worker_leaves_the_run_resumable_from_its_checkpoint`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from common import media, storage
from common.models import JobStatus
from common.tasks import reap_orphaned_jobs
from datasets_app.models import Clip, ClipStatus, VideoAttachJob
from datasets_app.services.video import (
    video_attach_job_create,
    video_attach_job_publish,
    video_attach_job_retry,
)
from tests.factories import ClipFactory
from tests.support.processes import CeleryWorker, celery_worker, purge_broker, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def _clip(vatex_id: str) -> Clip:
    youtube_id, start, end = vatex_id.rsplit("_", 2)
    return ClipFactory(
        vatex_id=vatex_id,
        youtube_id=youtube_id,
        start_seconds=float(start),
        end_seconds=float(end),
    )


def test_a_video_job_killed_mid_clip_is_reaped_shows_nothing_partial_and_reruns(
    s3_storage, settings, tmp_path, client, curator
):
    settings.LEPUS_VIDEO_FRAMES = 2
    first = _clip("killvideo01_000000_000002")
    second = _clip("killvideo02_000000_000002")
    for clip in (first, second):
        media.synthesize_video(tmp_path / f"{clip.vatex_id}.mp4", duration=2, width=160, height=90)
    job, _ = video_attach_job_create(directory=tmp_path)
    assert job is not None

    purge_broker()
    # A pause of the test worker: each clip sleeps after its video upload and before its poster,
    # so the kill lands while the second clip is half uploaded.
    slow = CeleryWorker(pauses={"video.upload": 4}, extra_env={"LEPUS_VIDEO_FRAMES": "2"}).start()
    try:
        video_attach_job_publish(job=job)

        def second_clip_half_uploaded() -> bool:
            return Clip.objects.get(pk=first.pk).status == ClipStatus.READY and storage.exists(
                f"clips/{second.vatex_id}/video.mp4"
            )

        wait_until(second_clip_half_uploaded, timeout=90, message="the second clip's upload")
        slow.kill()
    finally:
        slow.stop()

    job.refresh_from_db()
    assert (job.status, job.done, job.ready) == (JobStatus.RUNNING, 1, 1)
    second.refresh_from_db()
    # Half uploaded: the video is in the bucket, the poster is not, and the clip is not servable.
    assert second.status == ClipStatus.PROCESSING
    assert (second.video_key, second.poster_key, second.frame_count) == ("", "", 0)
    assert not storage.exists(f"clips/{second.vatex_id}/poster.jpg")
    assert list(Clip.objects.servable().values_list("pk", flat=True)) == [first.pk]

    # Nobody is left to end the job: the reaper (beat, every minute) fails it once its heartbeat
    # is older than the timeout.
    VideoAttachJob.objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.LEPUS_JOB_HEARTBEAT_TIMEOUT + 1)
    )
    assert reap_orphaned_jobs() == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "stopped responding" in job.error
    client.force_login(curator)
    page = client.get("/dashboard/datasets/")
    assert page.status_code == 200
    assert "stopped responding" in page.content.decode()

    # The re-run (the Data page's Retry button does the same) finishes only what was left.
    job = video_attach_job_retry(job_id=job.pk)
    assert job.status == JobStatus.QUEUED
    assert Clip.objects.get(pk=second.pk).status == ClipStatus.QUEUED
    with celery_worker(extra_env={"LEPUS_VIDEO_FRAMES": "2"}) as worker:
        video_attach_job_publish(job=job)
        wait_until(
            lambda: VideoAttachJob.objects.get(pk=job.pk).is_finished,
            timeout=90,
            message=lambda: f"the re-run; worker log:\n{worker.log()[-2000:]}",
        )
    job.refresh_from_db()
    assert (job.status, job.attempts, job.done, job.ready, job.failed, job.error) == (
        JobStatus.SUCCEEDED,
        2,
        2,
        2,
        0,
        "",
    )
    assert set(Clip.objects.servable().values_list("pk", flat=True)) == {first.pk, second.pk}
    second.refresh_from_db()
    assert storage.list_keys(f"clips/{second.vatex_id}") == [
        f"clips/{second.vatex_id}/frames/000.jpg",
        f"clips/{second.vatex_id}/frames/001.jpg",
        f"clips/{second.vatex_id}/poster.jpg",
        f"clips/{second.vatex_id}/video.mp4",
    ]
    with storage.local_copy(second.video_key) as path:
        assert media.is_browser_safe(media.probe(path))
