from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from annotation.models import Campaign, QCRun
from common.jobs import job_claim, job_finish, job_requeue
from common.models import JobStatus
from common.tasks import reap_orphaned_jobs
from tests.support.processes import wait_until


@pytest.fixture
def campaign(db):
    return Campaign.objects.create(slug="jobs", name="Jobs")


def test_a_job_is_claimed_once(campaign):
    run = QCRun.objects.create(campaign=campaign)
    assert job_claim(model=QCRun, job_id=run.pk) is not None
    assert job_claim(model=QCRun, job_id=run.pk) is None
    run.refresh_from_db()
    assert run.status == JobStatus.RUNNING
    assert run.attempts == 1


def test_finish_and_requeue(campaign):
    run = QCRun.objects.create(campaign=campaign)
    claimed = job_claim(model=QCRun, job_id=run.pk)
    assert job_finish(job=claimed, status=JobStatus.FAILED, error="boom")
    assert not job_finish(job=claimed, status=JobStatus.SUCCEEDED)  # no longer running
    run.refresh_from_db()
    assert (run.status, run.error) == (JobStatus.FAILED, "boom")
    assert job_requeue(job=run)
    run.refresh_from_db()
    assert (run.status, run.error, run.progress) == (JobStatus.QUEUED, "", 0.0)


@pytest.mark.celery_worker
def test_a_real_worker_over_redis_reaps_an_orphaned_job(celery_worker_process, settings):
    campaign = Campaign.objects.create(slug="reap", name="Reap")
    stale = timezone.now() - timedelta(seconds=settings.LEPUS_JOB_HEARTBEAT_TIMEOUT + 5)
    orphan = QCRun.objects.create(campaign=campaign, status=JobStatus.RUNNING, heartbeat_at=stale)
    alive = QCRun.objects.create(
        campaign=campaign, status=JobStatus.RUNNING, heartbeat_at=timezone.now()
    )

    assert settings.CELERY_BROKER_URL.startswith("redis://")
    reap_orphaned_jobs.delay()

    def reaped() -> bool:
        orphan.refresh_from_db()
        return orphan.status == JobStatus.FAILED

    wait_until(reaped, timeout=30, message="the worker to reap the orphan")
    assert "stopped responding" in orphan.error
    alive.refresh_from_db()
    assert alive.status == JobStatus.RUNNING
    assert "common.reap_orphaned_jobs" in celery_worker_process.log()
