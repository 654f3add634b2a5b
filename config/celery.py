"""The Celery application. Workers: `celery -A config worker -Q default` (and `-Q training` on GPU
machines); beat: `celery -A config beat`."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("lepus")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def database_connections_refresh(task: Any = None, **_kwargs: Any) -> None:
    """Before and after every task, what Django does around every request: close the database
    connections that are broken or older than CONN_MAX_AGE, keep the others. Celery's Django
    fix-up would close every connection around every task (a new PostgreSQL backend per quality
    pass) unless CELERY_DB_REUSE_MAX is set; settings set it, and this keeps CONN_MAX_AGE's
    meaning in the workers (docs/benchmarks.md, "Quality pass, stop 38")."""
    from django.db import close_old_connections

    if task is not None and getattr(task.request, "is_eager", False):
        return  # run in the caller's process, inside its request or transaction (as Celery's fix-up)
    close_old_connections()
