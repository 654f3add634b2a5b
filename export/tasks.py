"""Celery tasks of the export app: thin shells that load ids and call one service."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task

from common.tasks import job_task


@job_task("export.build_release")
def build_release(self, release_id: int) -> None:  # type: ignore[no-untyped-def]
    """Build a queued release (default queue). A second delivery of the same message is a no-op:
    the build claims its row with a conditional UPDATE. When storage is unreachable the release
    is queued again and the build retried with a backoff."""
    from common.storage import StorageUnavailable
    from common.tasks import retry_job_after_outage
    from export.models import Release
    from export.services import release_build, release_requeue

    try:
        release_build(release_id=release_id, task_id=self.request.id or "")
    except StorageUnavailable as error:
        retry_job_after_outage(
            self,
            error=error,
            job_model=Release,
            job_id=release_id,
            requeue=lambda: release_requeue(release=Release.objects.get(pk=release_id)),
        )


@shared_task(name="export.sweep_queued_releases", ignore_result=True)
def sweep_queued_releases() -> int:
    """Publish again the builds of releases still queued after 5 minutes (beat, every 5 minutes)."""
    from export.services import releases_enqueue_stale

    return releases_enqueue_stale(older_than=timedelta(minutes=5))
