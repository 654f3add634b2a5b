"""Celery tasks of datasets_app: thin shells that take an id and call one service."""

from __future__ import annotations

from typing import Any

from common.tasks import job_task


@job_task("datasets_app.attach_videos")
def attach_videos(self: Any, job_id: int) -> None:
    """Process the clips of a `VideoAttachJob` (probe, cut, transcode, poster, frames, upload).
    When storage is unreachable the job is queued again and retried with a backoff."""
    from common.storage import StorageUnavailable
    from common.tasks import retry_job_after_outage
    from datasets_app.models import VideoAttachJob
    from datasets_app.services.video import video_attach_job_retry, video_attach_job_run

    try:
        video_attach_job_run(job_id=job_id, task_id=self.request.id or "")
    except StorageUnavailable as error:

        def requeue() -> bool:
            return video_attach_job_retry(job_id=job_id).status == "queued"

        retry_job_after_outage(
            self, error=error, job_model=VideoAttachJob, job_id=job_id, requeue=requeue
        )
