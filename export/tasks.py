"""Celery tasks of the export app: thin shells that load ids and call one service."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task


@shared_task(
    name="export.build_release",
    ignore_result=True,
    acks_late=True,
    bind=True,
    max_retries=None,  # `retry_job_after_outage` counts against LEPUS_STORAGE_RETRIES
)
def build_release(self, release_id: int) -> None:  # type: ignore[no-untyped-def]
    """Build a queued release (default queue). A second delivery of the same message is a no-op:
    the build claims its row with a conditional UPDATE. When storage is unreachable the release
    is queued again and the build retried with a backoff."""
    from common.jobs import job_requeue
    from common.storage import StorageUnavailable
    from common.tasks import retry_job_after_outage
    from export.models import Release
    from export.services import release_build

    try:
        release_build(release_id=release_id, task_id=self.request.id or "")
    except StorageUnavailable as error:

        def requeue() -> bool:
            release = Release.objects.get(pk=release_id)
            if not job_requeue(job=release):
                return False
            Release.objects.filter(pk=release_id).update(files={}, total_bytes=0)
            return True

        retry_job_after_outage(
            self, error=error, job_model=Release, job_id=release_id, requeue=requeue
        )


@shared_task(name="export.sweep_queued_releases", ignore_result=True)
def sweep_queued_releases() -> int:
    """Publish again the builds of releases still queued after a while (the broker was down when
    they were created). Duplicates are harmless for the same reason as above."""
    from django.utils import timezone

    from common.models import JobStatus
    from common.tasks import enqueue
    from export.models import Release

    stale = timezone.now() - timedelta(minutes=5)
    release_ids = list(
        Release.objects.filter(status=JobStatus.QUEUED, created_at__lt=stale).values_list(
            "pk", flat=True
        )[:100]
    )
    for release_id in release_ids:
        enqueue(build_release, release_id)
    return len(release_ids)
