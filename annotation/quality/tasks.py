"""Celery tasks of quality control: thin shells that load ids and call one service. The services
that queue them send them by name (`common.tasks.task_named`), so only this module imports them."""

from __future__ import annotations

from celery import shared_task

from common.tasks import publish_now


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

    if catch_up(campaign_id=campaign_id)["workers"] >= SWEEP_MAX_WORKERS:
        publish_now(quality_catch_up, campaign_id)  # more were waiting: another pass right away


@shared_task(name="annotation.quality_catch_up_active", ignore_result=True)
def quality_catch_up_active() -> int:
    """The quality pass of every active crowd campaign with stale workers (beat, every 10 s):
    covers the last submissions of a burst, which published no pass of their own."""
    from annotation.quality.incremental import quality_catch_up_active as catch_up_active

    return catch_up_active()


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
