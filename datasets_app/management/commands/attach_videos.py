from __future__ import annotations

import time
from typing import Any

from django.core.management.base import CommandError, CommandParser

from common.management.base import LepusCommand
from common.models import FINISHED_JOB_STATUSES, JobStatus
from datasets_app.models import Clip, ClipStatus, VideoAttachJob
from datasets_app.services.video import (
    video_attach_job_create,
    video_attach_job_publish,
    video_attach_job_retry,
    video_attach_job_run,
)


class Command(LepusCommand):
    help = (
        "Attach the videos of DIR to clips by file name (<clip id>.<ext>: a pre-cut clip; "
        "<youtube id>.<ext>: a full source cut to each clip's window) and process them in a "
        "Celery job: probe, cut, transcode to H.264/AAC MP4, poster, frames, upload. By default "
        "the job is queued and its id printed; --wait follows it to the end."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("directory", nargs="?", help="Folder holding the video files.")
        parser.add_argument(
            "--force", action="store_true", help="Also re-process clips that are ready or queued."
        )
        parser.add_argument(
            "--upload-sources",
            action="store_true",
            help="Copy the source files into storage first, for workers on other machines.",
        )
        parser.add_argument(
            "--wait", action="store_true", help="Follow the job with a progress bar until it ends."
        )
        parser.add_argument(
            "--in-process",
            action="store_true",
            help="Run the job in this process instead of a Celery worker (maintenance without "
            "a worker).",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=None,
            help="With --wait: give up waiting after this many seconds (the job continues).",
        )
        parser.add_argument(
            "--retry-job", type=int, default=None, help="Re-queue a failed or cancelled job."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["retry_job"] is not None:
            try:
                job = video_attach_job_retry(job_id=options["retry_job"])
            except (VideoAttachJob.DoesNotExist, ValueError) as error:
                self._fail(str(error) or f"no video job {options['retry_job']}")
            payload: dict[str, Any] = {"ok": True, "job_id": job.pk, "retried": True}
        else:
            if not options["directory"]:
                self._fail("give a DIRECTORY (or --retry-job ID)")
            bar = None

            def upload_progress(done: int, total: int) -> None:
                nonlocal bar
                if bar is None:
                    bar = self.progress_bar(total=total, description="uploading sources")
                bar.n = done
                bar.refresh()

            try:
                job, plan = video_attach_job_create(
                    directory=options["directory"],
                    force=options["force"],
                    upload_sources=options["upload_sources"],
                    progress=upload_progress,
                )
            except FileNotFoundError as error:
                self._fail(str(error))
            if bar is not None:
                bar.close()
            payload = {"ok": True, "job_id": job.pk if job else None, **plan.summary()}
            if job is None:
                self.emit(payload, human=self._describe(payload))
                return
        if options["in_process"]:
            video_attach_job_run(job_id=job.pk)
            options["wait"] = True
        else:
            try:
                video_attach_job_publish(job=job)
            except Exception as error:  # broker unreachable: the job stays queued
                self._fail(
                    f"video job {job.pk} was created but could not be sent to a worker ({error}); "
                    f"start the broker and run: attach_videos --retry-job {job.pk} "
                    "(after the job is marked failed) or re-publish it"
                )
        if options["wait"]:
            job = self._follow(job.pk, timeout=options["timeout"])
            payload.update(self._outcome(job))
            if job.status != JobStatus.SUCCEEDED:
                if self.as_json:
                    self.emit({**payload, "ok": False})
                raise CommandError(f"video job {job.pk} ended {job.status}: {job.error}")
        else:
            payload["status"] = JobStatus.QUEUED.value
        self.emit(payload, human=self._describe(payload))

    def _fail(self, message: str) -> None:
        if self.as_json:
            self.emit({"ok": False, "error": message})
        raise CommandError(message)

    def _follow(self, job_id: int, *, timeout: float | None) -> VideoAttachJob:
        job = VideoAttachJob.objects.get(pk=job_id)
        bar = self.progress_bar(total=job.total, description=f"video job {job.pk}")
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                job.refresh_from_db()
                bar.n = job.done
                bar.set_postfix(ready=job.ready, failed=job.failed, status=job.status)
                bar.refresh()
                if job.status in FINISHED_JOB_STATUSES:
                    return job
                if deadline is not None and time.monotonic() > deadline:
                    self._fail(f"gave up waiting for video job {job.pk} ({job.status}); it goes on")
                time.sleep(0.5)
        finally:
            bar.close()

    @staticmethod
    def _outcome(job: VideoAttachJob) -> dict[str, Any]:
        errors = list(
            Clip.objects.filter(pk__in=job.clip_ids, status=ClipStatus.ERROR)
            .order_by("vatex_id")
            .values("vatex_id", "error_reason")[:50]
        )
        return {
            "status": job.status,
            "total": job.total,
            "done": job.done,
            "ready": job.ready,
            "failed": job.failed,
            "error": job.error,
            "clip_errors": [
                {"clip": row["vatex_id"], "reason": row["error_reason"]} for row in errors
            ],
        }

    @staticmethod
    def _describe(payload: dict[str, Any]) -> str:
        if payload.get("job_id") is None:
            return (
                f"No clip to process: {payload.get('files', 0)} video files, "
                f"{payload.get('unmatched_files', 0)} unmatched, "
                f"{payload.get('skipped_ready', 0)} clips already ready, "
                f"{payload.get('skipped_in_progress', 0)} in progress."
            )
        lines = [f"Video job {payload['job_id']}: {payload.get('status', 'queued')}"]
        if "matched_clips" in payload:
            lines.append(
                f"  {payload['matched_clips']} clips matched ({payload['precut']} pre-cut, "
                f"{payload['cut_from_source']} cut from a source); "
                f"{payload['unmatched_files']} files unmatched; "
                f"{payload['skipped_ready']} already ready, {payload['skipped_in_progress']} in "
                "progress (use --force to redo)"
            )
        if "ready" in payload:
            lines.append(f"  ready {payload['ready']}, failed {payload['failed']}")
            for row in payload["clip_errors"]:
                lines.append(f"  error {row['clip']}: {row['reason']}")
        return "\n".join(lines)
