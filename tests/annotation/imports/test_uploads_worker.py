"""An uploaded video archive end to end with a real Celery worker, Redis, moto's S3 and ffmpeg:
the API stores the zip in the bucket, the import job unpacks it and queues the video job, and the
video job makes the clip ready."""

from __future__ import annotations

import zipfile

import pytest

from annotation.models import ImportUpload
from common import media, storage
from common.models import JobStatus
from datasets_app.models import Clip, ClipStatus, VideoAttachJob
from tests.factories import ClipFactory
from tests.support.processes import wait_until

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def test_an_uploaded_archive_of_clips_ends_with_ready_videos(
    s3_storage, celery_worker_process, curator_client, tmp_path
):
    clip = ClipFactory(
        vatex_id="zipclip0001_000001_000004",
        youtube_id="zipclip0001",
        start_seconds=1.0,
        end_seconds=4.0,
    )
    video = tmp_path / "zipclip0001.mkv"
    media.synthesize_video(video, duration=5, width=320, height=180, codec="mpeg4")
    archive = tmp_path / "clips.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.write(video, "batch-1/zipclip0001.mkv")

    with archive.open("rb") as upload:
        response = curator_client.post("/api/v1/imports/", {"kind": "videos", "file": upload})
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    key = ImportUpload.objects.get(pk=job_id).storage_key
    assert storage.uses_s3() and storage.read_bytes(key) == archive.read_bytes()

    def finished() -> bool:
        job = ImportUpload.objects.get(pk=job_id)
        video_jobs = VideoAttachJob.objects.all()
        return job.is_finished and (
            job.status != JobStatus.SUCCEEDED
            or (video_jobs.exists() and all(item.is_finished for item in video_jobs))
        )

    wait_until(finished, timeout=240, message=lambda: celery_worker_process.log()[-3000:])
    body = curator_client.get(f"/api/v1/imports/{job_id}/").json()
    assert body["status"] == "succeeded", body["error"]
    video_job = VideoAttachJob.objects.get()
    assert body["result"]["job_ids"] == [video_job.pk]
    assert (video_job.status, video_job.ready, video_job.failed) == (JobStatus.SUCCEEDED, 1, 0)
    clip = Clip.objects.get(pk=clip.pk)
    assert clip.status == ClipStatus.READY
    assert clip.source_key == "sources/zipclip0001.mkv"
    assert "annotation.import_upload" in celery_worker_process.log()
