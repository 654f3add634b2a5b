"""Celery tasks of the export app: thin shells that load ids and call one service."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task


@shared_task(name="export.build_release", ignore_result=True, acks_late=True, bind=True)
def build_release(self, release_id: int) -> None:  # type: ignore[no-untyped-def]
    """Build a queued release (default queue). A second delivery of the same message is a no-op:
    the build claims its row with a conditional UPDATE."""
    from export.services import release_build

    release_build(release_id=release_id, task_id=self.request.id or "")


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
