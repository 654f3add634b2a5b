"""Publishing tasks safely from web requests, and the periodic reaper of orphaned jobs."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.db import transaction

logger = logging.getLogger(__name__)


def enqueue(task: Any, *args: Any, **kwargs: Any) -> None:
    """Send `task` once the current transaction commits.

    The web path must not depend on the broker: if publishing fails (broker down), the failure is
    logged and swallowed; periodic sweeps pick the work up when the broker is back.
    """

    def publish() -> None:
        try:
            task.apply_async(args=args, kwargs=kwargs, retry=False)
        except Exception as error:  # kombu raises OperationalError, socket errors, timeouts
            logger.warning(
                "could not publish %s%s: %s; a sweep will catch up", task.name, args, error
            )

    transaction.on_commit(publish)


@shared_task(name="common.reap_orphaned_jobs", ignore_result=True)
def reap_orphaned_jobs() -> int:
    """Mark jobs whose worker died as failed (run by celery beat every minute)."""
    from django.apps import apps

    from common.jobs import jobs_reap_orphans
    from common.models import Job

    job_models = [model for model in apps.get_models() if issubclass(model, Job)]
    reaped = jobs_reap_orphans(models_to_check=job_models)
    if reaped:
        logger.warning("marked %d orphaned job(s) failed", reaped)
    return reaped
