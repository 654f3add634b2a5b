"""Release services beyond the happy path: validation, failure, cancellation, re-queueing and
re-running, and the sweep of releases left queued."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.core.exceptions import ValidationError

from common.models import JobStatus
from export.models import Release, ReleaseRecord
from export.publishing import keys_under
from export.services import (
    release_build,
    release_create,
    release_requeue,
    release_rerun,
    releases_enqueue_stale,
)
from tests.export.builders import build_campaign
from tests.export.helpers import eligible
from tests.support.processes import purge_broker


def queued_builds() -> list[list[int]]:
    """The arguments of the export.build_release messages waiting in the test broker (kombu's
    Redis transport keeps each message as JSON with a base64 body of [args, kwargs, embed])."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    messages = [json.loads(raw) for raw in broker.lrange("default", 0, -1)]
    return sorted(
        json.loads(base64.b64decode(message["body"]))[0]
        for message in messages
        if message["headers"]["task"] == "export.build_release"
    )


def test_release_create_validates_its_arguments(db):
    data = build_campaign(slug="valid", clips=4, workers=4)
    for ratios in ((0.8,), (0.5, 0.2), (0.8, -0.1, 0.3), (0.25, 0.25, 0.25, 0.25)):
        with pytest.raises(ValidationError):
            release_create(campaigns=[data.campaign], ratios=ratios)
    with pytest.raises(ValidationError):
        release_create(campaigns=[])
    assert Release.objects.count() == 0
    release = release_create(campaigns=[data.campaign, data.campaign], seed=-3)
    assert (release.name, release.ratios, release.status) == (
        "vid-lepus-valid-seed-3",
        [0.8, 0.1, 0.1],  # the default: train, validation and a test split
        JobStatus.QUEUED,
    )
    assert list(release.campaigns.values_list("slug", flat=True)) == ["valid"]


def test_a_failing_build_is_marked_failed_and_leaves_no_files_or_records(db):
    data = build_campaign(slug="fails", clips=6, workers=4)
    clip = eligible(data.campaign)[0].candidate.clip
    clip.duration = float("nan")
    clip.save()
    release = release_create(campaigns=[data.campaign])
    release_build(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == JobStatus.FAILED
    assert "start, end or duration is not a usable number" in release.error
    assert clip.vatex_id in release.error
    assert release.files == {}
    assert keys_under("releases") == []
    assert not ReleaseRecord.objects.filter(release=release).exists()
    assert release_build(release_id=release.pk) is None  # a finished job is never claimed again


def test_a_cancelled_build_stops_and_publishes_nothing(db):
    data = build_campaign(slug="stop", clips=6, workers=4)
    release = release_create(campaigns=[data.campaign])
    Release.objects.filter(pk=release.pk).update(cancel_requested=True)
    release_build(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == JobStatus.CANCELLED
    assert release.files == {}
    assert keys_under("releases") == []


def test_release_requeue_queues_a_failed_release_again_with_its_files_cleared(
    db, django_capture_on_commit_callbacks
):
    data = build_campaign(slug="requeue", clips=4, workers=4)
    release = release_create(campaigns=[data.campaign])
    Release.objects.filter(pk=release.pk).update(
        status=JobStatus.FAILED, files={"README.md": "0" * 64}, total_bytes=9, error="boom"
    )
    purge_broker()
    with django_capture_on_commit_callbacks(execute=True):
        assert release_requeue(release=release)
    release.refresh_from_db()
    assert (release.status, release.files, release.total_bytes, release.error) == (
        JobStatus.QUEUED,
        {},
        0,
        "",
    )
    assert queued_builds() == []  # the task's own retry re-delivers it; requeue publishes nothing
    with django_capture_on_commit_callbacks(execute=True):
        assert not release_requeue(release=release)  # queued already: nothing to re-queue


def test_release_rerun_requeues_and_enqueues_the_build_after_commit(
    db, django_capture_on_commit_callbacks
):
    data = build_campaign(slug="rerun", clips=4, workers=4)
    release = release_create(campaigns=[data.campaign])
    Release.objects.filter(pk=release.pk).update(status=JobStatus.CANCELLED, total_bytes=5)
    purge_broker()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert release_rerun(release=release)
        assert queued_builds() == []  # nothing is published before the commit
    for callback in callbacks:
        callback()
    assert queued_builds() == [[release.pk]]
    release.refresh_from_db()
    assert (release.status, release.total_bytes) == (JobStatus.QUEUED, 0)
    purge_broker()
    with django_capture_on_commit_callbacks(execute=True):
        assert not release_rerun(release=release)
    assert queued_builds() == []


def test_releases_enqueue_stale_publishes_only_releases_queued_for_a_while(
    db, django_capture_on_commit_callbacks
):
    data = build_campaign(slug="stale", clips=4, workers=4)
    old, recent, failed = (release_create(campaigns=[data.campaign]) for _ in range(3))
    an_hour_ago = old.created_at - timedelta(hours=1)
    Release.objects.filter(pk__in=[old.pk, failed.pk]).update(created_at=an_hour_ago)
    Release.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED)
    purge_broker()
    with django_capture_on_commit_callbacks(execute=True):
        assert releases_enqueue_stale(older_than=timedelta(minutes=5)) == 1
    assert queued_builds() == [[old.pk]]
    assert recent.pk not in {arguments[0] for arguments in queued_builds()}
