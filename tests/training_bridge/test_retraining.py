"""Scheduled retraining: enough newly finalised candidates -> a release -> (once published) a run;
never two at once, even when two checks race."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from common.models import JobStatus
from tests.factories import CampaignCandidateFactory, CampaignFactory
from training_bridge.models import RetrainingState, TrainingRun
from training_bridge.services import retraining_check


def _finalise(count: int, campaign, when=None):  # type: ignore[no-untyped-def]
    return [
        CampaignCandidateFactory(
            campaign=campaign,
            is_finalised=True,
            finalised_at=when or timezone.now(),
            overall=4.0,
            normalized=0.75,
            training_class=4,
        )
        for _ in range(count)
    ]


def scheduled_releases() -> list:
    """The releases the schedule asked the export app for (`export.services.release_create`)."""
    from export.models import Release

    return list(Release.objects.filter(name__startswith="scheduled-").order_by("pk"))


@pytest.fixture
def no_leftover_builds():  # type: ignore[no-untyped-def]
    yield
    from tests.support.processes import purge_broker

    purge_broker()  # release builds published by a transactional test; no worker runs them


@pytest.mark.django_db
def test_the_schedule_builds_a_release_then_starts_one_run(
    settings, django_capture_on_commit_callbacks
):
    settings.LEPUS_RETRAIN_MIN_NEW_CANDIDATES = 3
    campaign = CampaignFactory()
    _finalise(2, campaign)
    assert retraining_check()["action"] == "none"
    assert scheduled_releases() == []

    _finalise(1, campaign)
    outcome = retraining_check()
    assert outcome["action"] == "build_release"
    assert outcome["new_candidates"] == 3
    assert outcome["campaigns"] == [campaign.slug]
    (release,) = scheduled_releases()
    assert release.status == JobStatus.QUEUED  # its build job is export's
    assert list(release.campaigns.all()) == [campaign]
    assert RetrainingState.objects.get().pending_release == release

    _finalise(5, campaign)
    assert retraining_check()["action"] == "waiting_for_release"
    assert len(scheduled_releases()) == 1 and TrainingRun.objects.count() == 0

    release.status = JobStatus.SUCCEEDED
    release.save(update_fields=["status"])
    with django_capture_on_commit_callbacks(execute=False):
        outcome = retraining_check()
    assert outcome["action"] == "start_run"
    run = TrainingRun.objects.get()
    assert outcome["run"] == run.pk
    assert (run.release, run.trigger, run.backbone) == (
        release,
        "schedule",
        settings.LEPUS_DEFAULT_BACKBONE,
    )
    state = RetrainingState.objects.get()
    assert state.pending_release is None and state.last_run == run

    # While the scheduled run is active, nothing new starts, however many new candidates exist.
    assert retraining_check()["action"] == "run_active"
    assert len(scheduled_releases()) == 1 and TrainingRun.objects.count() == 1


@pytest.mark.django_db
def test_only_candidates_finalised_after_the_last_release_count(settings):
    from export.models import Release

    settings.LEPUS_RETRAIN_MIN_NEW_CANDIDATES = 2
    campaign = CampaignFactory()
    _finalise(5, campaign, when=timezone.now() - timedelta(days=2))
    Release.objects.create(name="last", ratios=[0.8, 0.2], status=JobStatus.SUCCEEDED)
    _finalise(1, campaign)
    outcome = retraining_check(dry_run=True)
    assert outcome["action"] == "none" and outcome["new_candidates"] == 1
    _finalise(1, campaign)
    assert retraining_check(dry_run=True)["action"] == "build_release"
    assert scheduled_releases() == []  # a dry run changes nothing
    assert RetrainingState.objects.get().pending_release is None


@pytest.mark.django_db(transaction=True)
def test_two_racing_checks_request_one_release(settings, no_leftover_builds):
    settings.LEPUS_RETRAIN_MIN_NEW_CANDIDATES = 1
    _finalise(3, CampaignFactory())
    barrier = threading.Barrier(2)
    outcomes: list = []
    errors: list = []

    def check() -> None:
        try:
            barrier.wait(timeout=10)
            outcomes.append(retraining_check()["action"])
        except Exception as error:  # collected and asserted below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=check) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(outcomes) == ["build_release", "waiting_for_release"]
    assert len(scheduled_releases()) == 1


@pytest.mark.django_db
def test_a_scheduled_release_with_nothing_to_train_on_is_let_go_with_the_reason(settings):
    """A published scheduled release whose build left its train split empty: no run, the reason
    in the outcome, and the schedule waits for the next release instead of retrying this one."""
    from export.models import Release

    release = Release.objects.create(
        name="scheduled-empty", status=JobStatus.SUCCEEDED, ratios=[0.8, 0.2],
        counts={"splits": {"train": {"clips": 0, "candidates": 0},
                           "validation": {"clips": 0, "candidates": 0}}},
    )  # fmt: skip
    RetrainingState.objects.create(singleton=1, pending_release=release)

    outcome = retraining_check()

    assert outcome["action"] == "run_refused"
    assert outcome["reason"].startswith(
        f"release {release.pk} has no candidates in its train split"
    )
    assert not TrainingRun.objects.exists()
    state = RetrainingState.objects.get()
    assert (state.pending_release, state.last_outcome) == (None, "run_refused")
