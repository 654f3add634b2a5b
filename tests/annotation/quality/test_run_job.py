"""A full QC run as a job on a real Celery worker (Redis broker, PostgreSQL), queued the way the
dashboard and `run_qc --async` queue it."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from annotation.models import ParticipationStatus, QCRun
from common.models import JobStatus
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker
from tests.support.processes import wait_until

pytestmark = [pytest.mark.celery_worker]


def test_a_queued_qc_run_is_executed_by_a_worker_with_progress_and_summary(celery_worker_process):
    campaign = quality_crowd_campaign(slug="jobs", clips=4, candidates_per_clip=3, quota=3)
    items = list(campaign.items.order_by("id"))
    for index in range(2):
        worker = quality_worker(campaign, f"steady-{index}")
        for position, item in enumerate(items):
            quality_judge(
                worker,
                item,
                {
                    "descriptiveness": 1 + position % 5,
                    "relevance": 1 + (position + 1) % 5,
                    "fluency": 1 + (position + index) % 5,
                },
            )
    flat = quality_worker(campaign, "flat")
    for item in items:
        quality_judge(
            flat, item, {"descriptiveness": 3, "relevance": 3, "fluency": 3}, server_ms=400
        )

    out = StringIO()
    call_command("run_qc", "jobs", "--json", "--async", stdout=out)
    queued = json.loads(out.getvalue())
    run = QCRun.objects.get(pk=queued["run"])
    assert queued["status"] == JobStatus.QUEUED

    def finished() -> bool:
        run.refresh_from_db()
        return run.is_finished

    wait_until(finished, timeout=90, message="the QC run to finish")
    assert run.status == JobStatus.SUCCEEDED, run.error
    assert run.progress == 1.0 and run.attempts == 1 and run.worker_hostname
    assert run.summary["excluded"] == [{"worker": "flat", "rules": ["too_fast", "uniform"]}]
    assert run.summary["judgments_excluded"] == 12
    assert set(run.summary["agreement"]) == {"descriptiveness", "relevance", "fluency"}
    flat.refresh_from_db()
    assert flat.status == ParticipationStatus.EXCLUDED
