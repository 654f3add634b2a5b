"""Celery tasks of datasets_app: thin shells that take an id and call one service."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(name="datasets_app.attach_videos", bind=True, ignore_result=True, acks_late=True)
def attach_videos(self: Any, job_id: int) -> None:
    """Process the clips of a `VideoAttachJob` (probe, cut, transcode, poster, frames, upload)."""
    from datasets_app.services.video import video_attach_job_run

    video_attach_job_run(job_id=job_id, task_id=self.request.id or "")
