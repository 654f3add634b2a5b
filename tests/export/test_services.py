"""Release services beyond the happy path: validation, failure, cancellation."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from common.models import JobStatus
from export.models import Release, ReleaseRecord
from export.publishing import keys_under
from export.services import (
    release_build,
    release_create,
)
from tests.export.builders import build_campaign
from tests.export.helpers import eligible


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
        [0.8, 0.2],
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
