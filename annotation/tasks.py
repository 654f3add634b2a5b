"""Celery tasks of the annotation app: thin shells that load ids and call one service."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(name="annotation.after_submission", ignore_result=True)
def after_submission(assignment_id: int) -> None:
    """Incremental quality work after a worker submitted an assignment (QC statistics and rules,
    aggregation and review detection of the candidates it touched)."""
    from annotation.quality.incremental import quality_after_submission

    quality_after_submission(assignment_id=assignment_id)


@shared_task(name="annotation.quality_catch_up", ignore_result=True)
def quality_catch_up(campaign_id: int) -> None:
    """One quality pass of a campaign: every worker who submitted since their statistics were
    computed (see `annotation.crowd.debouncing`)."""
    from annotation.quality.incremental import SWEEP_MAX_WORKERS
    from annotation.quality.incremental import quality_catch_up as catch_up
    from common.tasks import publish_now

    if catch_up(campaign_id=campaign_id)["workers"] >= SWEEP_MAX_WORKERS:
        publish_now(quality_catch_up, campaign_id)  # more were waiting: another pass right away


@shared_task(name="annotation.quality_catch_up_active", ignore_result=True)
def quality_catch_up_active() -> int:
    """The quality pass of every active crowd campaign with stale workers (beat, every 10 s):
    covers the last submissions of a burst, which published no pass of their own."""
    from annotation.quality.incremental import quality_catch_up_active as catch_up_active

    return catch_up_active()


@shared_task(name="annotation.expire_leases", ignore_result=True)
def expire_leases() -> int:
    """Return the slots of assignments whose lease ran out (beat, every minute)."""
    from annotation.crowd.services.assignment import assignments_expire

    return assignments_expire()


@shared_task(name="annotation.quality_sweep", ignore_result=True)
def quality_sweep() -> None:
    """Catch up on quality work that could not be published while the broker was down."""
    from annotation.quality.incremental import quality_sweep as sweep

    sweep()


@shared_task(name="annotation.qc_run", ignore_result=True, acks_late=True)
def qc_run(run_id: int) -> None:
    """A full QC recompute of a campaign (a `QCRun` row)."""
    from annotation.quality.run import qc_run_execute

    qc_run_execute(run_id=run_id)


@shared_task(name="annotation.calibration_run", ignore_result=True, acks_late=True)
def calibration_run(run_id: int) -> None:
    """A rater-severity calibration of a campaign (a `CalibrationRun` row)."""
    from annotation.quality.calibration_job import calibration_run_execute

    calibration_run_execute(run_id=run_id)


@shared_task(
    name="annotation.import_upload",
    bind=True,
    ignore_result=True,
    acks_late=True,
    max_retries=None,  # `retry_job_after_outage` counts against LEPUS_STORAGE_RETRIES
)
def import_upload(self: Any, job_id: int) -> None:
    """Import a file uploaded on the import page (an `ImportUpload` row). When storage is
    unreachable the job is queued again and retried with a backoff."""
    from annotation.imports.uploads import import_upload_run
    from annotation.models import ImportUpload
    from common.jobs import job_requeue
    from common.storage import StorageUnavailable
    from common.tasks import retry_job_after_outage

    try:
        import_upload_run(job_id=job_id, task_id=self.request.id or "")
    except StorageUnavailable as error:

        def requeue() -> bool:
            return job_requeue(job=ImportUpload.objects.get(pk=job_id))

        retry_job_after_outage(
            self, error=error, job_model=ImportUpload, job_id=job_id, requeue=requeue
        )
