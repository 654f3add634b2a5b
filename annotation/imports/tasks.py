"""Celery task of the import page: importing an uploaded file. `annotation.imports.uploads` queues
it by name (`common.tasks.task_named`), so only this module imports the service."""

from __future__ import annotations

from typing import Any

from common.tasks import job_task, retry_job_after_outage


@job_task("annotation.import_upload")
def import_upload(self: Any, job_id: int) -> None:
    """Import a file uploaded on the import page (an `ImportUpload` row). When storage is
    unreachable the job is queued again and retried with a backoff."""
    from annotation.imports.uploads import import_upload_run
    from annotation.models import ImportUpload
    from common.jobs import job_requeue
    from common.storage import StorageUnavailable

    try:
        import_upload_run(job_id=job_id, task_id=self.request.id or "")
    except StorageUnavailable as error:

        def requeue() -> bool:
            return job_requeue(job=ImportUpload.objects.get(pk=job_id))

        retry_job_after_outage(
            self, error=error, job_model=ImportUpload, job_id=job_id, requeue=requeue
        )
