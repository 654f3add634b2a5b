"""Sending Celery tasks from web requests without depending on the broker, by task or by the
task's registered name. Below every app's services and tasks: a service whose own task imports it
sends that task by name, so neither module imports the other."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import current_app
from celery.canvas import Signature
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

# Until when (time.monotonic()) this process skips publishing after a failed publish.
_broker_down_until = 0.0


def task_named(name: str) -> Signature:
    """The task registered as `name`, for `publish_now` and `enqueue`: a service whose task calls
    it back sends the task by name, so only the task module imports the service (no cycle). Same
    routing and options as sending the task object."""
    return current_app.signature(name)


def publish_now(task: Any, *args: Any, **kwargs: Any) -> bool:
    """Send `task` (a task, or `task_named(name)`) now; False (logged, never raised) when
    the broker is down.

    The web path must not depend on the broker. After a failed publish this process skips the
    broker for `LEPUS_BROKER_DOWN_BACKOFF` seconds, so requests don't each wait for another
    connection timeout; periodic sweeps pick the work up when the broker is back.

    A service whose task imports it sends by name, so that the two modules don't import each
    other; the name resolves to the registered task (same routing and options as sending the
    task object).
    """
    global _broker_down_until
    name = task.name
    if time.monotonic() < _broker_down_until:
        logger.info("broker down; not publishing %s%s", name, args)
        return False
    try:
        task.apply_async(args=args, kwargs=kwargs, retry=False)
    except Exception as error:  # kombu raises OperationalError, socket errors, timeouts
        _broker_down_until = time.monotonic() + settings.LEPUS_BROKER_DOWN_BACKOFF
        logger.warning("could not publish %s%s: %s; a sweep will catch up", name, args, error)
        return False
    return True


def enqueue(task: Any, *args: Any, **kwargs: Any) -> None:
    """Send `task` (a task or `task_named(name)`; see `publish_now`) once the current transaction
    commits."""
    transaction.on_commit(lambda: publish_now(task, *args, **kwargs))
