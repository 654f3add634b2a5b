"""Celery tasks of the annotation app: thin shells that load ids and call one service."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="annotation.after_submission", ignore_result=True)
def after_submission(assignment_id: int) -> None:
    """Incremental quality work after a worker submitted an assignment (QC statistics and rules,
    aggregation and review detection of the candidates it touched)."""
    from annotation.services.quality import quality_after_submission

    quality_after_submission(assignment_id=assignment_id)
