"""The Celery tasks of the annotation app, which Celery's autodiscovery imports: each wing keeps
its tasks in its own `tasks.py` (names unchanged: `annotation.<task>`)."""

from __future__ import annotations

from annotation.crowd.tasks import allocation_redecide, expire_leases
from annotation.imports.tasks import import_upload
from annotation.quality.tasks import (
    after_submission,
    calibration_run,
    qc_run,
    quality_catch_up,
    quality_catch_up_active,
    quality_sweep,
)

__all__ = [
    "after_submission",
    "allocation_redecide",
    "calibration_run",
    "expire_leases",
    "import_upload",
    "qc_run",
    "quality_catch_up",
    "quality_catch_up_active",
    "quality_sweep",
]
