from __future__ import annotations

from typing import Any

from common.management.arguments import LazyBar, command_errors, refuse
from common.management.base import LepusCommand
from common.management.declared import Arg, flag
from common.models import JobStatus
from datasets_app.management.jobs import IN_PROCESS, JOB_TIMEOUT, jobs_start
from datasets_app.models import VideoAttachJob
from datasets_app.services.video import (
    video_attach_job_retry,
    video_attach_jobs_create,
    video_attach_jobs_follow,
    video_attach_jobs_outcome,
    video_attach_jobs_summary,
)


class Command(LepusCommand):
    """Attach the videos of DIR to clips by file name (<clip id>.<ext>: a pre-cut clip;
    <youtube id>.<ext>: a full source cut to each clip's window) and process them in a Celery job:
    probe, cut, transcode to H.264/AAC MP4, poster, frames, upload. By default the job is queued
    and its id printed; --wait follows it to the end."""

    arguments = (
        Arg("directory", nargs="?", help="Folder holding the video files."),
        flag("--force", help="Also re-process clips that are ready or queued."),
        flag(
            "--upload-sources",
            help="Copy the source files into storage first, for workers on other machines.",
        ),
        Arg(
            "--clips-per-job",
            type=int,
            default=None,
            help="Split the work into jobs of N clips, so that several workers share it.",
        ),
        flag("--wait", help="Follow the job(s) with a progress bar to the end."),
        IN_PROCESS.but(
            help="Run the job(s) in this process instead of a Celery worker (maintenance without "
            "a worker)."
        ),
        JOB_TIMEOUT.but(
            help="With --wait: give up waiting after this many seconds (the jobs continue)."
        ),
        Arg(
            "--retry-job",
            type=int,
            default=None,
            help="Send a failed, cancelled or still queued job to a worker again.",
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["retry_job"] is not None:
            try:
                jobs = [video_attach_job_retry(job_id=options["retry_job"])]
            except (VideoAttachJob.DoesNotExist, ValueError) as error:
                refuse(self, str(error) or f"no video job {options['retry_job']}")
            payload: dict[str, Any] = {
                "ok": True,
                "retried": True,
                "job_id": jobs[0].pk,
                "job_ids": [job.pk for job in jobs],
            }
        else:
            if not options["directory"]:
                refuse(self, "give a DIRECTORY (or --retry-job ID)")
            upload_progress = LazyBar(self, "uploading sources")
            with command_errors(FileNotFoundError, ValueError, command=self):
                jobs, plan = video_attach_jobs_create(
                    directory=options["directory"],
                    force=options["force"],
                    upload_sources=options["upload_sources"],
                    clips_per_job=options["clips_per_job"],
                    progress=upload_progress,
                )
            upload_progress.close()
            payload = video_attach_jobs_summary(jobs=jobs, plan=plan)
        if not jobs:
            self.emit(payload, human=self._describe(payload))
            return
        jobs_start(self, jobs, in_process=options["in_process"], label="video job", payload={})
        if options["wait"] or options["in_process"]:
            finished = self._follow([job.pk for job in jobs], timeout=options["timeout"])
            payload.update(video_attach_jobs_outcome(jobs=finished))
            if payload["status"] != JobStatus.SUCCEEDED:
                refuse(
                    self,
                    f"video job(s) {', '.join(str(job.pk) for job in jobs)} ended "
                    f"{payload['status']}: {payload['error']}",
                    {**payload, "ok": False},
                )
        else:
            payload["status"] = JobStatus.QUEUED.value
        self.emit(payload, human=self._describe(payload))

    def _follow(self, job_ids: list[int], *, timeout: float | None) -> list[VideoAttachJob]:
        jobs = list(VideoAttachJob.objects.filter(pk__in=job_ids).order_by("pk"))
        bar = self.progress_bar(
            total=sum(job.total for job in jobs),
            description=f"video job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, job_ids))}",
        )

        def progress(jobs: list[VideoAttachJob]) -> None:
            bar.n = sum(job.done for job in jobs)
            bar.set_postfix(
                ready=sum(job.ready for job in jobs), failed=sum(job.failed for job in jobs)
            )
            bar.refresh()

        try:
            return video_attach_jobs_follow(job_ids=job_ids, timeout=timeout, progress=progress)
        except TimeoutError as error:
            refuse(self, str(error))
        finally:
            bar.close()

    @staticmethod
    def _describe(payload: dict[str, Any]) -> str:
        if payload.get("job_id") is None:
            return (
                f"No clip to process: {payload.get('files', 0)} video files, "
                f"{payload.get('unmatched_files', 0)} unmatched, "
                f"{payload.get('skipped_ready', 0)} clips already ready, "
                f"{payload.get('skipped_in_progress', 0)} in progress."
            )
        ids = ", ".join(str(job_id) for job_id in payload["job_ids"])
        lines = [f"Video job(s) {ids}: {payload.get('status', 'queued')}"]
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
