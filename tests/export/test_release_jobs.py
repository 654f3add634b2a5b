"""Releases as Celery jobs on a real worker: a killed build, and the S3 path with the command."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import timedelta

import boto3
import pytest
import requests
from django.core.management import call_command
from django.utils import timezone

from common import storage
from common.models import JobStatus
from common.tasks import reap_orphaned_jobs
from export.models import Release
from export.publishing import keys_under
from export.services import release_create, release_rerun, release_verify
from tests.export.builders import build_campaign
from tests.export.helpers import build
from tests.support.paused_worker import PAUSES_VARIABLE
from tests.support.processes import celery_worker, wait_until


@pytest.fixture
def slow_release_builds(monkeypatch):  # type: ignore[no-untyped-def]
    """Make the next worker's builds slow: three rows per batch and half a second after each (a
    pause of tests/support/paused_worker.py), so the test can kill the worker mid-build."""
    monkeypatch.setenv("LEPUS_RELEASE_BATCH_SIZE", "3")
    monkeypatch.setenv(PAUSES_VARIABLE, json.dumps({"release.batch": 0.5}))


@pytest.mark.celery_worker
def test_a_build_killed_mid_way_publishes_nothing_and_a_rerun_succeeds(
    slow_release_builds, celery_worker_process, client, curator, settings
):
    data = build_campaign(slug="killed", clips=14, workers=6)
    release = release_create(campaigns=[data.campaign], seed=1)

    def writing() -> bool:
        release.refresh_from_db()
        return release.status == JobStatus.RUNNING and "written" in release.progress_message

    wait_until(writing, timeout=90, message="the worker to start writing the release")
    wait_until(lambda: bool(keys_under("releases/_staging")), timeout=30, message="staged files")
    celery_worker_process.kill()

    release.refresh_from_db()
    assert release.status == JobStatus.RUNNING  # nobody is left to say otherwise
    assert release.files == {}
    assert keys_under(f"releases/{release.pk}") == []
    assert keys_under("releases/_staging")  # the partial files exist only in staging
    assert not Release.objects.published().exists()
    client.force_login(curator)
    assert client.get("/api/v1/releases/").json() == []

    # The heartbeat stops; the periodic reaper fails the row once it is older than the timeout.
    Release.objects.filter(pk=release.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.LEPUS_JOB_HEARTBEAT_TIMEOUT + 1)
    )
    assert reap_orphaned_jobs() == 1
    release.refresh_from_db()
    assert release.status == JobStatus.FAILED
    assert "stopped responding" in release.error
    assert keys_under(f"releases/{release.pk}") == []

    assert release_rerun(release=release)
    with celery_worker(extra_env={PAUSES_VARIABLE: "", "LEPUS_RELEASE_BATCH_SIZE": "500"}):
        wait_until(
            lambda: Release.objects.get(pk=release.pk).is_finished,
            timeout=120,
            message="the re-run",
        )
    release.refresh_from_db()
    assert (release.status, release.attempts, release.error) == (JobStatus.SUCCEEDED, 2, "")
    assert keys_under("releases/_staging") == []
    assert keys_under(f"releases/{release.pk}") == sorted(
        f"releases/{release.pk}/{relative}" for relative in release.files
    )
    assert release_verify(release=release) == {"ok": True, "mismatches": []}
    assert [entry["id"] for entry in client.get("/api/v1/releases/").json()] == [release.pk]
    # The worker's files are the bytes an in-process build of the same state writes.
    assert build(campaigns=[data.campaign], seed=1, ratios=release.ratios).files == release.files


@pytest.mark.celery_worker
def test_build_release_waits_for_a_real_worker_and_publishes_to_s3(
    s3_storage, celery_worker_process
):
    build_campaign(slug="ons3", clips=10, workers=6)
    out = io.StringIO()
    call_command(
        "build_release",
        "--campaign",
        "ons3",
        "--seed",
        "7",
        "--ratios",
        "0.8,0.1,0.1",
        "--wait",
        "--timeout",
        "120",
        "--json",
        stdout=out,
    )
    payload = json.loads(out.getvalue())
    release = Release.objects.get(pk=payload["release"])
    assert payload == {
        "release": release.pk,
        "status": "succeeded",
        "files": release.files,
        "location": f"s3://{s3_storage}/releases/{release.pk}",
    }
    assert len(release.files) == 11  # card, manifest, three formats of three splits
    s3 = boto3.client(
        "s3", endpoint_url=storage.get_storage().endpoint_url, region_name="us-east-1"
    )
    listed = sorted(item["Key"] for item in s3.list_objects_v2(Bucket=s3_storage)["Contents"])
    assert listed == sorted(f"releases/{release.pk}/{relative}" for relative in release.files)
    for relative, sha256 in release.files.items():
        url = storage.media_url(f"releases/{release.pk}/{relative}", download_name=relative)
        response = requests.get(url, timeout=30)
        assert response.status_code == 200
        assert hashlib.sha256(response.content).hexdigest() == sha256
    verified = io.StringIO()
    call_command("verify_release", str(release.pk), "--json", stdout=verified)
    assert json.loads(verified.getvalue()) == {"ok": True, "mismatches": []}
