"""Lifecycle of long jobs (`common.models.Job` subclasses), shared by every app's Celery tasks.

A task claims its row with a conditional UPDATE (two workers never run the same job), reports
progress and a heartbeat as it goes, and ends the row succeeded, failed or cancelled. A worker that
dies mid-job stops the heartbeat; `jobs_reap_orphans` (run by beat and on demand) then marks such
rows failed so nothing stays "running" forever, and the job can be re-run.
"""

from __future__ import annotations

import logging
import math
import socket
import traceback
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

import numpy as np
from django.db import models
from django.utils import timezone

from common.models import Job, JobStatus

JobT = TypeVar("JobT", bound=Job)
Progress = Callable[[float, str], None]
logger = logging.getLogger(__name__)


class JobCancelled(Exception):
    """Raised inside a job when a curator asked to cancel it."""


def job_claim(*, model: type[JobT], job_id: int, task_id: str = "") -> JobT | None:
    """Move a queued job to running; None when another worker has it or it is finished."""
    now = timezone.now()
    claimed = model.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING,
        started_at=now,
        heartbeat_at=now,
        worker_hostname=socket.gethostname()[:200],
        task_id=task_id[:64],
        attempts=models.F("attempts") + 1,
        error="",
    )
    if claimed != 1:
        return None
    return cast(JobT, model.objects.get(pk=job_id))


def job_progress(*, job: Job, fraction: float, message: str = "") -> None:
    """Store progress and a heartbeat; raise JobCancelled when cancellation was requested."""
    fraction = max(0.0, min(1.0, float(fraction)))
    now = timezone.now()
    type(job).objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
        progress=fraction, progress_message=message[:300], heartbeat_at=now
    )
    job.progress, job.progress_message, job.heartbeat_at = fraction, message[:300], now
    if type(job).objects.filter(pk=job.pk, cancel_requested=True).exists():
        raise JobCancelled(f"{type(job).__name__} {job.pk} was cancelled")


def job_finish(*, job: Job, status: str, error: str = "", **fields: object) -> bool:
    """End a running job; extra fields are written in the same UPDATE (dicts and lists, the JSON
    fields' values, made JSON-safe: PostgreSQL's JSON has no NaN). False if it was not running."""
    now = timezone.now()
    values: dict[str, object] = {
        "status": status,
        "finished_at": now,
        "heartbeat_at": now,
        "error": error[:20000],
        **{
            name: json_safe(value) if isinstance(value, (dict, list)) else value
            for name, value in fields.items()
        },
    }
    if status == JobStatus.SUCCEEDED:
        values["progress"] = 1.0
    updated = type(job).objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(**values)
    if updated:
        for name, value in values.items():
            setattr(job, name, value)
    return bool(updated)


def job_execute(
    *, model: type[JobT], job_id: int, task_id: str = "", work: Callable[[JobT, Progress], Any]
) -> tuple[JobT | None, bool]:
    """Claim a queued job, run `work(job, progress)` and end the job with what it returned as its
    `summary` (made JSON-safe), failed with the reason and traceback, or cancelled.

    Returns (the job, True when it succeeded); (None, False) when another worker has it."""
    job = job_claim(model=model, job_id=job_id, task_id=task_id)
    if job is None:
        return None, False

    def progress(fraction: float, message: str) -> None:
        job_progress(job=job, fraction=fraction, message=message)

    try:
        summary = work(job, progress)
    except JobCancelled:
        job_finish(job=job, status=JobStatus.CANCELLED, error="cancelled by a curator")
        return job, False
    except Exception as error:  # the job ends failed with the reason; the worker lives on
        logger.exception("%s %s failed", model.__name__, job_id)
        job_finish(
            job=job,
            status=JobStatus.FAILED,
            error=f"{type(error).__name__}: {error}\n{traceback.format_exc()}",
        )
        return job, False
    return job, job_finish(job=job, status=JobStatus.SUCCEEDED, summary=json_safe(summary))


def json_safe(value: Any) -> Any:
    """NaN and infinities become null (PostgreSQL's JSON has neither), NumPy scalars plain
    numbers; dicts, lists and tuples are walked."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def job_requeue(*, job: Job) -> bool:
    """Put a failed or cancelled job back in the queue for a re-run."""
    updated = (
        type(job)
        .objects.filter(pk=job.pk, status__in=(JobStatus.FAILED, JobStatus.CANCELLED))
        .update(
            status=JobStatus.QUEUED,
            progress=0.0,
            progress_message="",
            error="",
            cancel_requested=False,
            started_at=None,
            finished_at=None,
        )
    )
    return bool(updated)


def jobs_reap_orphans(*, models_to_check: Iterable[type[Job]]) -> int:
    """Fail running jobs whose heartbeat stopped (their worker died); returns how many."""
    total = 0
    now = timezone.now()
    for model in models_to_check:
        total += model.objects.orphaned(now=now).update(
            status=JobStatus.FAILED,
            finished_at=now,
            error="The worker running this job stopped responding (killed or lost); "
            "it can be re-run.",
        )
    return total
