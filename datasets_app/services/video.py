"""The video pipeline: match files to clips, then (in a Celery worker) probe, cut, transcode, make a
poster and training frames, and upload everything to storage.

Never called from a web request, and never with ffmpeg or an upload inside a database
transaction: each clip's row is updated in short single statements before and after the work.
A broken or missing source puts the clip in the error state with the reason; such a clip is never
served (`Clip.objects.servable()` wants status ready and a video).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from common import media, storage
from common.broker import enqueue, task_named
from common.jobs import JobCancelled, job_claim, job_finish, job_progress, job_requeue
from common.models import FINISHED_JOB_STATUSES, JobStatus
from datasets_app.models import Clip, ClipModality, ClipStatus, VideoAttachJob
from datasets_app.services.clip_media import ClipVideoOutcome, clip_process_video
from datasets_app.services.images import clip_process_image
from datasets_app.services.imports.base import CLIP_ID_PATTERN, SOURCE_ID_PATTERN

logger = logging.getLogger(__name__)

# `datasets_app.tasks.attach_videos`, sent by name: the task imports this module.
ATTACH_VIDEOS_TASK = "datasets_app.attach_videos"

VIDEO_EXTENSIONS = (
    ".mp4",
    ".3gp",
    ".avi",
    ".flv",
    ".m4v",
    ".mkv",
    ".mov",
    ".mpeg",
    ".mpg",
    ".ogv",
    ".ts",
    ".webm",
    ".wmv",
)
UNMATCHED_LISTED = 50


# --- Matching files to clips ---------------------------------------------------------------------


@dataclass
class AttachMatch:
    clip_id: int
    vatex_id: str
    path: Path
    precut: bool


@dataclass
class AttachPlan:
    directory: Path
    files: int = 0
    matches: list[AttachMatch] = field(default_factory=list)
    unmatched_files: list[str] = field(default_factory=list)
    duplicate_stems: list[str] = field(default_factory=list)
    skipped_ready: int = 0
    skipped_in_progress: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "matched_clips": len(self.matches),
            "precut": sum(1 for match in self.matches if match.precut),
            "cut_from_source": sum(1 for match in self.matches if not match.precut),
            "unmatched_files": len(self.unmatched_files),
            "unmatched_examples": self.unmatched_files[:UNMATCHED_LISTED],
            "duplicate_stems": self.duplicate_stems[:UNMATCHED_LISTED],
            "skipped_ready": self.skipped_ready,
            "skipped_in_progress": self.skipped_in_progress,
        }


def _extension_rank(path: Path) -> tuple[int, str]:
    # .mp4 first, then the others alphabetically: a deterministic choice among same-stem files.
    return (0 if path.suffix.lower() == ".mp4" else 1, path.suffix.lower())


def video_attach_plan(*, directory: str | Path, force: bool = False) -> AttachPlan:
    """Which clips the files of `directory` provide: `<clip id>.<ext>` is a pre-cut clip,
    `<youtube id>.<ext>` a full source cut to each of its clips' windows (pre-cut wins). Clips
    already ready, queued or processing are skipped unless `force`."""
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"no such directory: {folder}")
    plan = AttachPlan(directory=folder.resolve())
    by_stem: dict[str, list[Path]] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.suffix.lower() not in VIDEO_EXTENSIONS:
            continue
        plan.files += 1
        by_stem.setdefault(path.stem, []).append(path)
    chosen: dict[str, Path] = {}
    for stem, paths in by_stem.items():
        chosen[stem] = sorted(paths, key=_extension_rank)[0]
        if len(paths) > 1:
            plan.duplicate_stems.append(stem)

    clip_stems = [stem for stem in chosen if CLIP_ID_PATTERN.match(stem)]
    source_stems = [stem for stem in chosen if SOURCE_ID_PATTERN.match(stem)]
    rows: dict[int, tuple[str, str, str]] = {}
    for start in range(0, len(clip_stems), 1000):
        for pk, vatex_id, youtube_id, status in Clip.objects.filter(
            vatex_id__in=clip_stems[start : start + 1000], modality=ClipModality.VIDEO
        ).values_list("pk", "vatex_id", "youtube_id", "status"):
            rows[pk] = (vatex_id, youtube_id, status)
    for start in range(0, len(source_stems), 1000):
        for pk, vatex_id, youtube_id, status in Clip.objects.filter(
            youtube_id__in=source_stems[start : start + 1000], modality=ClipModality.VIDEO
        ).values_list("pk", "vatex_id", "youtube_id", "status"):
            rows[pk] = (vatex_id, youtube_id, status)

    used_stems: set[str] = set()
    for pk, (vatex_id, youtube_id, status) in sorted(rows.items(), key=lambda item: item[1][0]):
        if vatex_id in chosen:
            path, precut = chosen[vatex_id], True
            used_stems.add(vatex_id)
        elif youtube_id in chosen:
            path, precut = chosen[youtube_id], False
            used_stems.add(youtube_id)
        else:
            continue
        if not force and status == ClipStatus.READY:
            plan.skipped_ready += 1
            continue
        if not force and status in (ClipStatus.QUEUED, ClipStatus.PROCESSING):
            plan.skipped_in_progress += 1
            continue
        plan.matches.append(AttachMatch(pk, vatex_id, path.resolve(), precut))
    plan.unmatched_files = sorted(chosen[stem].name for stem in chosen if stem not in used_stems)
    return plan


def video_attach_job_create(
    *,
    directory: str | Path,
    user: User | None = None,
    force: bool = False,
    upload_sources: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[VideoAttachJob | None, AttachPlan]:
    """One job for every matched clip (see `video_attach_jobs_create`); None when nothing matched."""
    jobs, plan = video_attach_jobs_create(
        directory=directory,
        user=user,
        force=force,
        upload_sources=upload_sources,
        progress=progress,
    )
    return (jobs[0] if jobs else None), plan


def video_attach_jobs_create(
    *,
    directory: str | Path,
    user: User | None = None,
    force: bool = False,
    upload_sources: bool = False,
    clips_per_job: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[VideoAttachJob], AttachPlan]:
    """Match the files, record each clip's source, queue the clips and create the job rows: one
    job, or one per `clips_per_job` clips so that several workers share the work. The caller
    publishes the jobs (`video_attach_job_publish`) or runs them (`video_attach_job_run`).

    By default a clip's source key is the file's absolute path, for workers that share this
    machine's disk; `upload_sources` first copies each matched file into storage
    (`sources/<file name>`) so workers anywhere can fetch it. No job when nothing matched."""
    if clips_per_job is not None and clips_per_job < 1:
        raise ValueError("clips_per_job must be at least 1")
    plan = video_attach_plan(directory=directory, force=force)
    if not plan.matches:
        return [], plan
    sources: dict[Path, str] = {}
    if upload_sources:
        paths = sorted({match.path for match in plan.matches})
        for index, path in enumerate(paths, start=1):
            # Uploads happen before (outside) the transaction below.
            sources[path] = storage.put_file(f"sources/{path.name}", path)
            if progress is not None:
                progress(index, len(paths))
    else:
        sources = {match.path: str(match.path) for match in plan.matches}
    size = clips_per_job or len(plan.matches)
    jobs: list[VideoAttachJob] = []
    with transaction.atomic():
        for start in range(0, len(plan.matches), size):
            chunk = plan.matches[start : start + size]
            jobs.append(
                VideoAttachJob.objects.create(
                    directory=str(plan.directory)[:1000],
                    requested_by=user if user is not None and user.is_authenticated else None,
                    force=force,
                    clip_ids=[match.clip_id for match in chunk],
                    total=len(chunk),
                    summary=plan.summary(),
                )
            )
        for match in plan.matches:
            Clip.objects.filter(pk=match.clip_id).update(
                source_key=sources[match.path][:500],
                status=ClipStatus.QUEUED,
                error_reason="",
            )
    return jobs, plan


def video_attach_job_publish(*, job: VideoAttachJob) -> None:
    """Send the job to a Celery worker now; raises when the broker cannot be reached (the job
    stays queued and `video_attach_job_retry` or a re-publish picks it up)."""
    task_named(ATTACH_VIDEOS_TASK).apply_async(args=[job.pk], retry=False)


def video_attach_job_retry(*, job_id: int) -> VideoAttachJob:
    """Put a failed or cancelled job back in the queue; its unfinished clips are queued again.
    A job still queued (e.g. never published because the broker was down) is returned as it is,
    to be published again: a second delivery is harmless, the claim is atomic."""
    job = VideoAttachJob.objects.get(pk=job_id)
    if job.status == JobStatus.QUEUED:
        return job
    if not job_requeue(job=job):
        raise ValueError(
            f"video job {job_id} is {job.status}; only failed, cancelled or queued jobs retry"
        )
    Clip.objects.filter(
        pk__in=job.clip_ids, status__in=(ClipStatus.PENDING, ClipStatus.PROCESSING)
    ).exclude(source_key="").update(status=ClipStatus.QUEUED)
    job.refresh_from_db()
    return job


def video_attach_job_requeue(*, job_id: int) -> VideoAttachJob:
    """Retry the job (`video_attach_job_retry`) and send it to a worker once the transaction
    commits; a broker that is down is logged, never raised (the web path does not wait on it, and
    the job stays queued for the next retry)."""
    with transaction.atomic():
        job = video_attach_job_retry(job_id=job_id)
        enqueue(task_named(ATTACH_VIDEOS_TASK), job.pk)
    return job


def video_attach_jobs_summary(*, jobs: list[VideoAttachJob], plan: AttachPlan) -> dict[str, Any]:
    """What `attach_videos` reports once its jobs exist: the matching plan and the job ids."""
    return {
        "ok": True,
        **plan.summary(),
        "job_id": jobs[0].pk if jobs else None,
        "job_ids": [job.pk for job in jobs],
    }


def video_attach_jobs_follow(
    *,
    job_ids: list[int],
    timeout: float | None,
    progress: Callable[[list[VideoAttachJob]], None] | None = None,
) -> list[VideoAttachJob]:
    """Wait until every job has finished (polling twice a second) and return them; `progress`
    sees the jobs at each poll. TimeoutError after `timeout` seconds (the jobs go on)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        jobs = list(VideoAttachJob.objects.filter(pk__in=job_ids).order_by("pk"))
        if progress is not None:
            progress(jobs)
        if all(job.status in FINISHED_JOB_STATUSES for job in jobs):
            return jobs
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(
                f"gave up waiting for video job(s) {', '.join(map(str, job_ids))}; they go on"
            )
        time.sleep(0.5)


def video_attach_jobs_outcome(*, jobs: list[VideoAttachJob]) -> dict[str, Any]:
    """How finished jobs ended: the first unsuccessful status (else succeeded), the clip counts,
    the jobs' errors and up to 50 clips in error."""
    clip_ids = [clip_id for job in jobs for clip_id in job.clip_ids]
    errors = list(
        Clip.objects.filter(pk__in=clip_ids, status=ClipStatus.ERROR)
        .order_by("vatex_id")
        .values("vatex_id", "error_reason")[:50]
    )
    unsuccessful = [job for job in jobs if job.status != JobStatus.SUCCEEDED]
    return {
        "status": unsuccessful[0].status if unsuccessful else JobStatus.SUCCEEDED.value,
        "total": sum(job.total for job in jobs),
        "done": sum(job.done for job in jobs),
        "ready": sum(job.ready for job in jobs),
        "failed": sum(job.failed for job in jobs),
        "error": "; ".join(f"job {job.pk}: {job.error}" for job in unsuccessful if job.error),
        "clip_errors": [{"clip": row["vatex_id"], "reason": row["error_reason"]} for row in errors],
    }


# --- Running a job (in the Celery worker) ---------------------------------------------------------


def video_attach_job_run(*, job_id: int, task_id: str = "") -> VideoAttachJob | None:
    """Process every clip of the job that is not finished yet (so a re-run after a dead worker
    resumes). None when the job is not queued (another worker has it, or it is done)."""
    job = job_claim(model=VideoAttachJob, job_id=job_id, task_id=task_id)
    if job is None:
        return None
    pending = list(
        Clip.objects.filter(
            pk__in=job.clip_ids, status__in=(ClipStatus.QUEUED, ClipStatus.PROCESSING)
        )
        .order_by("vatex_id")
        .values_list("pk", flat=True)
    )

    def heartbeat() -> None:
        VideoAttachJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
            heartbeat_at=timezone.now()
        )

    try:
        for clip_pk in pending:
            outcome = clip_process_media(clip_id=clip_pk, heartbeat=heartbeat)
            VideoAttachJob.objects.filter(pk=job.pk).update(
                done=F("done") + 1,
                ready=F("ready") + int(outcome.ready),
                failed=F("failed") + int(not outcome.ready),
            )
            job.refresh_from_db(fields=["done", "total"])
            job_progress(
                job=job,
                fraction=job.done / job.total if job.total else 1.0,
                message=f"{job.done} of {job.total} clips",
            )
    except JobCancelled:
        Clip.objects.filter(pk__in=job.clip_ids, status=ClipStatus.QUEUED).update(
            status=ClipStatus.PENDING
        )
        job_finish(job=job, status=JobStatus.CANCELLED, error="cancelled by a curator")
        return job
    except Exception as error:  # storage down, database lost...: the job fails and can be retried
        logger.exception("video job %s failed", job.pk)
        job_finish(job=job, status=JobStatus.FAILED, error=f"{type(error).__name__}: {error}")
        if storage.is_unavailable(error):
            # The task retries such jobs with a backoff (`common.tasks.retry_job_after_outage`).
            raise storage.StorageUnavailable(str(error)) from error
        return job
    job_finish(job=job, status=JobStatus.SUCCEEDED, progress_message=f"{job.total} clips")
    return job


def clip_process_media(
    *, clip_id: int, heartbeat: media.Heartbeat | None = None
) -> ClipVideoOutcome:
    """Process one clip of a job by its modality: a video (`clip_media.clip_process_video`) or a
    still image (`images.clip_process_image`); one job may hold both."""
    if Clip.objects.filter(pk=clip_id, modality=ClipModality.IMAGE).exists():
        return clip_process_image(clip_id=clip_id)
    return clip_process_video(clip_id=clip_id, heartbeat=heartbeat)


# --- Synthetic videos for the demo and the tests ------------------------------------------------


@dataclass
class DemoVideosResult:
    directory: Path
    written: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "directory": str(self.directory),
            "written": len(self.written),
            "existing": len(self.existing),
            "files": self.written + self.existing,
        }


def demo_videos_make(
    *,
    directory: str | Path,
    clips: int = 10,
    seconds: float = 4.0,
    height: int = 240,
    full_sources: bool = False,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> DemoVideosResult:
    """Write synthetic videos (a lavfi test pattern with a sine tone, different per clip) for the
    first `clips` clips without a video, ready for `attach_videos DIRECTORY`.

    By default each is a pre-cut clip `<clip id>.mp4` of `seconds` seconds; with `full_sources`
    a full source `<youtube id>.mkv` (MPEG-4, so the pipeline really transcodes it) long enough
    to cut every window of that YouTube id from."""
    if clips < 1:
        raise ValueError("clips must be at least 1")
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    result = DemoVideosResult(directory=folder.resolve())
    chosen = list(
        Clip.objects.exclude(status=ClipStatus.READY)
        .filter(modality=ClipModality.VIDEO)
        .order_by("vatex_id")
        .values_list("vatex_id", "youtube_id", "end_seconds")[:clips]
    )
    width = int(round(height * 16 / 9 / 2)) * 2
    jobs: list[tuple[Path, float]] = []
    if full_sources:
        longest: dict[str, float] = {}
        for _, youtube_id, end in chosen:
            longest[youtube_id] = max(longest.get(youtube_id, 0.0), end)
        jobs = [(folder / f"{youtube_id}.mkv", end + 1.0) for youtube_id, end in longest.items()]
    else:
        jobs = [(folder / f"{vatex_id}.mp4", seconds) for vatex_id, _, _ in chosen]
    for index, (path, duration) in enumerate(jobs):
        if path.exists() and not overwrite:
            result.existing.append(path.name)
        else:
            partial = path.with_name(f".partial-{path.name}")
            media.synthesize_video(
                partial,
                duration=duration,
                width=width,
                height=height,
                pattern=media.SYNTHETIC_PATTERNS[index % len(media.SYNTHETIC_PATTERNS)],
                hue_degrees=(index * 47) % 360,
                frequency=220.0 + 55.0 * (index % 12),
                codec="mpeg4" if full_sources else "h264",
            )
            shutil.move(partial, path)
            result.written.append(path.name)
        if progress is not None:
            progress(index + 1, len(jobs))
    return result
