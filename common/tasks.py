"""Retrying jobs after a storage outage, the periodic reaper of orphaned jobs, and webhook
delivery. Publishing lives in `common.broker`; `enqueue` and `publish_now` are re-exported here for
the callers that import them from this module."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import shared_task
from django.conf import settings

from common.broker import enqueue as enqueue
from common.broker import publish_now as publish_now
from common.broker import task_named as task_named

logger = logging.getLogger(__name__)


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


def job_task(name: str) -> Any:
    """The decorator of a task that runs one job row: bound (it retries itself), acknowledged only
    after it ran (a worker that dies leaves the message to another), no result, and no retry cap
    of its own (`retry_job_after_outage` counts against LEPUS_STORAGE_RETRIES)."""
    return shared_task(name=name, bind=True, ignore_result=True, acks_late=True, max_retries=None)


def storage_retry_countdown(retries: int) -> float:
    """Seconds before retry number `retries + 1`: the base backoff, doubled each time, capped."""
    base = settings.LEPUS_STORAGE_RETRY_BACKOFF
    return float(min(settings.LEPUS_STORAGE_RETRY_BACKOFF_MAX, base * (2**retries)))


def retry_job_after_outage(
    task: Any,
    *,
    error: BaseException,
    job_model: type[Any],
    job_id: int,
    requeue: Callable[[], bool],
) -> None:
    """A job failed because storage (S3) was unreachable: queue it again and retry the task with
    an exponential backoff, at most LEPUS_STORAGE_RETRIES times. After the last try the job stays
    failed with its error (a curator can re-run it). Raises celery's Retry when it retries."""
    retries = int(task.request.retries or 0)
    limit = settings.LEPUS_STORAGE_RETRIES
    if retries >= limit:
        logger.error("%s %s: storage still unreachable after %d retries", task.name, job_id, limit)
        job_model.objects.filter(pk=job_id).update(
            error=f"Storage unreachable; gave up after {limit} retries. Last error: {error}"[:20000]
        )
        return
    if not requeue():
        return
    countdown = storage_retry_countdown(retries)
    message = f"Storage unreachable; retry {retries + 1} of {limit} in {countdown:g} s"
    job_model.objects.filter(pk=job_id).update(
        progress_message=message[:300], error=f"{message}. Last error: {error}"[:20000]
    )
    logger.warning("%s %s: %s (%s)", task.name, job_id, message, error)
    raise task.retry(countdown=countdown, exc=error, max_retries=limit)


@shared_task(name="common.tasks.webhook_deliver", ignore_result=True)
def webhook_deliver(delivery_id: int) -> None:
    """Deliver one webhook; on failure schedule the next attempt with exponential backoff."""
    from common.webhooks import deliver

    delay = deliver(delivery_id)
    if delay is not None:
        webhook_deliver.apply_async(args=(delivery_id,), countdown=delay)


@shared_task(name="common.tasks.webhook_sweep", ignore_result=True)
def webhook_sweep() -> int:
    """Republish overdue pending deliveries (a publish lost while the broker was down)."""
    from common.webhooks import due_pending_ids

    ids = due_pending_ids()
    for delivery_id in ids:
        publish_now(webhook_deliver, delivery_id)
    return len(ids)
