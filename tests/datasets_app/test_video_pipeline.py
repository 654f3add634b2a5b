"""The video pipeline with real ffmpeg: cutting a window from a generated full-length source into a
browser-safe MP4 with a poster and frames; broken and missing sources; S3 on loopback; a real
Celery worker over Redis; the synthetic demo videos; the file-matching rules."""

from __future__ import annotations

import hashlib
import io
import json

import boto3
import pytest
import requests
from django.core.management import call_command
from django.core.management.base import CommandError

from common import media, storage
from common.models import JobStatus
from datasets_app.models import Clip, ClipStatus, VideoAttachJob
from datasets_app.services.clip_media import clip_process_video
from datasets_app.services.video import (
    video_attach_job_create,
    video_attach_job_retry,
    video_attach_job_run,
    video_attach_plan,
)
from tests.datasets_app.helpers import run_command
from tests.factories import ClipFactory


def _clip(vatex_id: str, **fields) -> Clip:
    youtube_id, start, end = vatex_id.rsplit("_", 2)
    return ClipFactory(
        vatex_id=vatex_id,
        youtube_id=youtube_id,
        start_seconds=float(start),
        end_seconds=float(end),
        **fields,
    )


def _probe_stored(key: str) -> media.MediaInfo:
    with storage.local_copy(key) as path:
        assert media.moov_before_mdat(path), "the MP4 index must come before the media data"
        return media.probe(path)


@pytest.mark.django_db
def test_a_full_source_is_cut_to_each_clip_window(tmp_path, settings):
    settings.LEPUS_VIDEO_MAX_HEIGHT = 120
    settings.LEPUS_VIDEO_FRAMES = 3
    first = _clip("src_Abc-123_000003_000007")
    second = _clip("src_Abc-123_000001_000003")
    # A full-length source of another codec and an odd height, longer than both windows.
    media.synthesize_video(
        tmp_path / "src_Abc-123.mkv", duration=8, width=320, height=181, codec="mpeg4"
    )

    job, plan = video_attach_job_create(directory=tmp_path)
    assert plan.summary()["cut_from_source"] == 2
    assert Clip.objects.get(pk=first.pk).status == ClipStatus.QUEUED
    video_attach_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert (job.status, job.total, job.done, job.ready, job.failed) == (
        JobStatus.SUCCEEDED,
        2,
        2,
        2,
        0,
    )
    assert job.progress == 1.0
    for clip, window in ((first, 4.0), (second, 2.0)):
        clip.refresh_from_db()
        assert clip.status == ClipStatus.READY
        assert clip.error_reason == ""
        assert clip.video_key == f"clips/{clip.vatex_id}/video.mp4"
        assert clip.poster_key == f"clips/{clip.vatex_id}/poster.jpg"
        assert clip.frames_key == f"clips/{clip.vatex_id}/frames"
        info = _probe_stored(clip.video_key)
        assert abs(info.duration - window) <= 0.1
        assert abs(clip.duration - info.duration) < 0.001
        assert (info.video_codec, info.pixel_format, info.audio_codec) == ("h264", "yuv420p", "aac")
        # Height capped (and even); width keeps the aspect ratio, rounded to an even number.
        assert (clip.width, clip.height) == (info.width, info.height)
        assert info.height == 120
        assert info.width % 2 == 0 and abs(info.width - 320 * 120 / 181) <= 2
        assert storage.read_bytes(clip.poster_key)[:3] == b"\xff\xd8\xff"
        assert storage.list_keys(clip.frames_key) == [
            f"clips/{clip.vatex_id}/frames/{index:03d}.jpg" for index in range(3)
        ]
        assert clip.frame_count == 3
        assert clip.processed_at is not None
    assert set(Clip.objects.servable().values_list("pk", flat=True)) == {first.pk, second.pk}


@pytest.mark.django_db
def test_missing_and_broken_sources_put_clips_in_error_and_never_serve_them(tmp_path, settings):
    settings.LEPUS_VIDEO_FRAMES = 2
    corrupt = _clip("corruptclip_000000_000004")
    (tmp_path / "corruptclip_000000_000004.mp4").write_bytes(
        b"\x00\x00\x00\x18ftypmp42" + b"junk" * 500
    )
    short = _clip("shortsource_000005_000009")
    media.synthesize_video(tmp_path / "shortsource.mp4", duration=3, width=160, height=90)
    silent = _clip("audiofree01_000000_000002")  # no audio track: still fine, gets silence
    media.synthesize_video(
        tmp_path / "audiofree01.mp4", duration=3, width=160, height=90, audio=False
    )
    # A clip that was served before; re-attached with --force from a broken file.
    served = _clip(
        "wasready001_000000_000004",
        status=ClipStatus.READY,
        video_key="clips/wasready001_000000_000004/video.mp4",
    )
    (tmp_path / "wasready001.mp4").write_bytes(b"not a video at all")

    job, plan = video_attach_job_create(directory=tmp_path, force=True)
    assert plan.summary()["matched_clips"] == 4
    # A source that disappears between attaching and processing.
    missing = _clip(
        "gonemissing_000000_000004",
        status=ClipStatus.QUEUED,
        source_key=str(tmp_path / "gonemissing.mp4"),
    )
    VideoAttachJob.objects.filter(pk=job.pk).update(clip_ids=[*job.clip_ids, missing.pk], total=5)
    video_attach_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert (job.status, job.done, job.ready, job.failed) == (JobStatus.SUCCEEDED, 5, 1, 4)
    reasons = dict(
        Clip.objects.filter(status=ClipStatus.ERROR).values_list("vatex_id", "error_reason")
    )
    assert set(reasons) == {corrupt.vatex_id, short.vatex_id, served.vatex_id, missing.vatex_id}
    assert reasons[corrupt.vatex_id].startswith("the source video cannot be read: ffprobe failed:")
    assert "Invalid data found when processing input" in reasons[corrupt.vatex_id]
    assert reasons[short.vatex_id] == (
        "the source video is 3.00 s long; the clip's window [5, 9] s ends after it"
    )
    assert reasons[missing.vatex_id] == f"source video not found: {tmp_path / 'gonemissing.mp4'}"
    assert reasons[served.vatex_id].startswith("the source video cannot be read:")
    assert list(Clip.objects.servable().values_list("vatex_id", flat=True)) == [silent.vatex_id]
    served.refresh_from_db()
    assert (served.video_key, served.poster_key, served.is_servable) == ("", "", False)
    info = _probe_stored(Clip.objects.get(pk=silent.pk).video_key)
    assert info.audio_codec == "aac"
    assert abs(info.duration - 2.0) <= 0.1


@pytest.mark.django_db
def test_matching_rules_for_file_names(tmp_path):
    precut = _clip("Ab_cd-EFGHI_000010_000020")
    cut = _clip("Ab_cd-EFGHI_000030_000040")
    both = _clip("zzzzzzzzzzz_000001_000011")
    ready = _clip(
        "readyreadyx_000000_000010", status=ClipStatus.READY, video_key="clips/x/video.mp4"
    )
    for name in (
        "Ab_cd-EFGHI_000010_000020.webm",
        "Ab_cd-EFGHI.mkv",
        "zzzzzzzzzzz_000001_000011.mp4",
        "zzzzzzzzzzz_000001_000011.avi",
        "zzzzzzzzzzz.mp4",
        "readyreadyx.mp4",
        "unrelated-video.mp4",
        "notes.txt",
        ".hidden.mp4",
    ):
        (tmp_path / name).write_bytes(b"")

    plan = video_attach_plan(directory=tmp_path)
    chosen = {match.vatex_id: (match.path.name, match.precut) for match in plan.matches}
    assert chosen == {
        precut.vatex_id: ("Ab_cd-EFGHI_000010_000020.webm", True),
        cut.vatex_id: ("Ab_cd-EFGHI.mkv", False),
        both.vatex_id: ("zzzzzzzzzzz_000001_000011.mp4", True),
    }
    assert plan.files == 7  # notes.txt and the hidden file are not videos
    assert plan.unmatched_files == ["unrelated-video.mp4", "zzzzzzzzzzz.mp4"]
    assert plan.duplicate_stems == ["zzzzzzzzzzz_000001_000011"]
    assert plan.skipped_ready == 1
    forced = video_attach_plan(directory=tmp_path, force=True)
    assert ready.vatex_id in {match.vatex_id for match in forced.matches}


@pytest.mark.django_db
def test_attach_videos_reports_when_nothing_matches(tmp_path):
    _clip("someclip000_000000_000004")
    (tmp_path / "other.mp4").write_bytes(b"")
    result = run_command("attach_videos", str(tmp_path))
    assert result["job_id"] is None
    assert (result["files"], result["unmatched_files"], result["matched_clips"]) == (1, 1, 0)
    assert not VideoAttachJob.objects.exists()


@pytest.mark.django_db
def test_attach_videos_refuses_when_the_broker_is_down_and_says_how_to_resend(
    tmp_path, monkeypatch
):
    _clip("Ab_cd-EFGHI_000010_000020")
    (tmp_path / "Ab_cd-EFGHI_000010_000020.mp4").write_bytes(b"")

    def broker_down(*, job: VideoAttachJob) -> None:
        raise ConnectionError("no broker")

    monkeypatch.setattr("datasets_app.management.jobs.video_attach_job_publish", broker_down)
    out = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("attach_videos", str(tmp_path), "--json", stdout=out, stderr=io.StringIO())
    job = VideoAttachJob.objects.get()
    message = (
        f"video job {job.pk} was created but could not be sent to a worker (no broker); once "
        f"the broker is up, run: python manage.py attach_videos --retry-job {job.pk}"
    )
    assert str(refused.value) == message
    assert json.loads(out.getvalue()) == {"ok": False, "error": message}
    assert job.status == JobStatus.QUEUED


@pytest.mark.django_db
def test_a_retried_job_resumes_with_the_clips_not_finished(tmp_path, settings):
    settings.LEPUS_VIDEO_FRAMES = 1
    finished = _clip("resumeclip1_000000_000002")
    unfinished = _clip("resumeclip2_000000_000002")
    for clip in (finished, unfinished):
        media.synthesize_video(tmp_path / f"{clip.vatex_id}.mp4", duration=2, width=160, height=90)
    job, _ = video_attach_job_create(directory=tmp_path)
    # As if the worker died after the first clip: the job was reaped (failed), the first clip is
    # ready, the second was being processed.
    assert clip_process_video(clip_id=finished.pk).ready
    finished.refresh_from_db()
    Clip.objects.filter(pk=unfinished.pk).update(status=ClipStatus.PROCESSING)
    VideoAttachJob.objects.filter(pk=job.pk).update(
        status=JobStatus.FAILED, done=1, ready=1, error="worker lost"
    )

    video_attach_job_retry(job_id=job.pk)
    assert Clip.objects.get(pk=unfinished.pk).status == ClipStatus.QUEUED
    video_attach_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert (job.status, job.done, job.ready, job.failed, job.attempts) == (
        JobStatus.SUCCEEDED,
        2,
        2,
        0,
        1,
    )
    assert Clip.objects.get(pk=finished.pk).processed_at == finished.processed_at  # not redone
    assert Clip.objects.get(pk=unfinished.pk).status == ClipStatus.READY


@pytest.mark.django_db
def test_a_cancelled_job_stops_and_gives_its_clips_back(tmp_path, settings):
    settings.LEPUS_VIDEO_FRAMES = 1
    clips = [_clip(f"cancelclip{index}_000000_000002") for index in range(3)]
    for clip in clips:
        media.synthesize_video(tmp_path / f"{clip.vatex_id}.mp4", duration=2, width=160, height=90)
    job, _ = video_attach_job_create(directory=tmp_path)
    VideoAttachJob.objects.filter(pk=job.pk).update(cancel_requested=True)
    video_attach_job_run(job_id=job.pk)
    job.refresh_from_db()
    assert (job.status, job.done) == (JobStatus.CANCELLED, 1)
    statuses = list(Clip.objects.order_by("vatex_id").values_list("status", flat=True))
    assert statuses == [ClipStatus.READY, ClipStatus.PENDING, ClipStatus.PENDING]


@pytest.mark.django_db
def test_make_demo_videos_writes_distinct_clips_for_clips_without_video(tmp_path):
    _clip("democlip001_000000_000010")
    _clip("democlip002_000000_000010")
    _clip("democlip003_000000_000010", status=ClipStatus.READY, video_key="clips/x/video.mp4")
    out = tmp_path / "videos"
    result = run_command("make_demo_videos", "--clips", "5", "--seconds", "1.5", "--out", str(out))
    assert (result["written"], result["existing"]) == (2, 0)
    assert result["files"] == ["democlip001_000000_000010.mp4", "democlip002_000000_000010.mp4"]
    digests = set()
    for name in result["files"]:
        info = media.probe(out / name)
        assert abs(info.duration - 1.5) <= 0.1
        assert (info.video_codec, info.audio_codec) == ("h264", "aac")
        digests.add(hashlib.sha256((out / name).read_bytes()).hexdigest())
    assert len(digests) == 2
    again = run_command("make_demo_videos", "--clips", "5", "--seconds", "1.5", "--out", str(out))
    assert (again["written"], again["existing"]) == (0, 2)

    sources = run_command(
        "make_demo_videos", "--clips", "1", "--full-sources", "--out", str(tmp_path / "src")
    )
    assert sources["files"] == ["democlip001.mkv"]
    info = media.probe(tmp_path / "src" / "democlip001.mkv")
    assert info.video_codec == "mpeg4"
    assert abs(info.duration - 11.0) <= 0.1


@pytest.mark.celery_worker
def test_a_real_worker_runs_the_video_job_over_redis_and_the_output_round_trips_through_s3(
    s3_storage, s3_server, celery_worker_process, settings, tmp_path
):
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    clip = _clip("s3workclip1_000002_000005")
    media.synthesize_video(
        tmp_path / "s3workclip1.mkv", duration=6, width=320, height=180, codec="mpeg4"
    )

    out = io.StringIO()
    call_command(
        "attach_videos",
        str(tmp_path),
        "--upload-sources",
        "--wait",
        "--timeout",
        "240",
        "--json",
        stdout=out,
        stderr=io.StringIO(),
    )
    result = json.loads(out.getvalue())
    assert (result["ok"], result["status"], result["ready"], result["failed"]) == (
        True,
        "succeeded",
        1,
        0,
    )
    job = VideoAttachJob.objects.get(pk=result["job_id"])
    assert job.task_id != ""  # claimed through Celery, not in this process
    assert "datasets_app.attach_videos" in celery_worker_process.log()

    clip.refresh_from_db()
    assert clip.status == ClipStatus.READY
    assert clip.source_key == "sources/s3workclip1.mkv"
    bucket_keys = {
        item["Key"]
        for item in boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
        .list_objects_v2(Bucket=s3_storage)
        .get("Contents", [])
    }
    expected = {
        "sources/s3workclip1.mkv",
        f"clips/{clip.vatex_id}/video.mp4",
        f"clips/{clip.vatex_id}/poster.jpg",
        *(f"clips/{clip.vatex_id}/frames/{index:03d}.jpg" for index in range(clip.frame_count)),
    }
    assert bucket_keys == expected
    assert clip.frame_count == settings.LEPUS_VIDEO_FRAMES
    info = _probe_stored(clip.video_key)
    assert abs(info.duration - 3.0) <= 0.1
    # The browser's presigned URL serves the same bytes.
    url = storage.media_url(clip.video_key)
    assert "X-Amz-Signature=" in url
    response = requests.get(url, timeout=10)
    assert response.status_code == 200
    assert response.content == storage.read_bytes(clip.video_key)


@pytest.mark.django_db
def test_the_work_splits_into_jobs_for_several_workers(tmp_path, settings):
    settings.LEPUS_VIDEO_FRAMES = 1
    clips = [_clip(f"splitclip{index:02d}_000000_000001") for index in range(3)]
    for clip in clips:
        media.synthesize_video(tmp_path / f"{clip.vatex_id}.mp4", duration=1, width=160, height=90)
    result = run_command("attach_videos", str(tmp_path), "--clips-per-job", "2", "--in-process")
    assert len(result["job_ids"]) == 2
    assert result["job_id"] == result["job_ids"][0]
    assert [VideoAttachJob.objects.get(pk=pk).total for pk in result["job_ids"]] == [2, 1]
    assert (result["status"], result["total"], result["ready"], result["failed"]) == (
        "succeeded",
        3,
        3,
        0,
    )
    assert Clip.objects.servable().count() == 3
