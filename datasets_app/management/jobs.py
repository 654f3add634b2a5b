"""How `attach_videos` and `import_images` start the processing jobs they create: here, or on a
Celery worker; a broker that does not answer leaves the jobs queued and refuses with the command
that sends them again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.management.arguments import refuse
from common.management.base import LepusCommand
from common.management.declared import Arg, flag
from datasets_app.models import VideoAttachJob
from datasets_app.services.video import video_attach_job_publish, video_attach_job_run

# The options both job-creating commands declare (each words the help for its own files).
IN_PROCESS = flag("--in-process")
JOB_TIMEOUT = Arg("--timeout", type=float, default=None)


def jobs_start(
    command: LepusCommand,
    jobs: list[VideoAttachJob],
    *,
    in_process: bool,
    label: str,
    payload: Mapping[str, Any],
) -> None:
    """Run `jobs` in this process (`in_process`) or send each to a worker. On a broker error the
    refusal names the job as `label` ("job", "video job") and carries `payload` with --json."""
    if in_process:
        for job in jobs:
            video_attach_job_run(job_id=job.pk)
        return
    for job in jobs:
        try:
            video_attach_job_publish(job=job)
        except Exception as error:  # broker unreachable: the job stays queued
            message = (
                f"{label} {job.pk} was created but could not be sent to a worker ({error}); "
                f"once the broker is up, run: python manage.py attach_videos --retry-job {job.pk}"
            )
            refuse(command, message, {**payload, "ok": False, "error": message})
