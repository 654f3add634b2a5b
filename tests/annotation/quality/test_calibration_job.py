"""The calibration job on PostgreSQL: what it reads (kept judgments of non-control candidates),
what it stores (severities with standard errors, calibrated scores), how a QC run queues it, the
management command and the curator API."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from annotation.models import (
    CalibrationRun,
    CampaignCandidate,
    CandidateCalibration,
    Judgment,
    QCRun,
    WorkerSeverity,
)
from annotation.quality.calibration_job import (
    calibration_campaign,
    calibration_run_execute,
    worker_severities,
)
from annotation.quality.run import qc_run_execute
from common.models import JobStatus
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db

KEYS = ("descriptiveness", "relevance", "fluency")


def harsh_campaign(slug: str = "calibrated"):
    """Eight clips × 3 candidates; the two halves have the same qualities (1..5 cycling). Two fair
    workers rate everything (the quality ±1 on a fixed pattern); the first half's third rater is
    "harsh" (two points less, never below 1), the second half's is a third fair worker."""
    campaign = quality_crowd_campaign(slug=slug, clips=8, candidates_per_clip=3, quota=3)
    items = list(campaign.items.order_by("id"))
    fair = [quality_worker(campaign, f"fair-{index}") for index in range(3)]
    harsh = quality_worker(campaign, "harsh")
    for position, item in enumerate(items):
        quality = 1 + (position % 12) % 5
        for index, worker in enumerate(fair):
            if index == 2 and position < 12:
                continue
            noise = ((position + index) % 3) - 1
            quality_judge(worker, item, dict.fromkeys(KEYS, min(5, max(1, quality + noise))))
        if position < 12:
            quality_judge(harsh, item, dict.fromkeys(KEYS, max(1, quality - 2)))
    return campaign, fair, harsh, items


def half_means(values: dict[int, float], items: list) -> tuple[float, float]:
    first = [values[item.pk] for item in items[:12]]
    second = [values[item.pk] for item in items[12:]]
    return sum(first) / 12, sum(second) / 12


def test_the_harsh_worker_gets_a_clearly_positive_severity_and_scores_are_corrected():
    campaign, fair, harsh, items = harsh_campaign()
    summary = calibration_campaign(campaign=campaign)
    assert summary["judgments"] == 72 and summary["workers"] == 4
    assert summary["candidates"] == 24 and summary["severities"] == 12
    severities = worker_severities(campaign=campaign)
    for key in KEYS:
        harsh_entry = severities[harsh.pk][key]
        assert harsh_entry["low"] > 0  # the whole 95% interval is on the harsh side
        assert harsh_entry["judgments"] == 12
        for worker in fair:
            assert severities[worker.pk][key]["severity"] < harsh_entry["severity"] - 1.0
    stored = CandidateCalibration.objects.get(campaign_candidate=items[4])
    assert set(stored.scores) == set(KEYS) and set(stored.standard_errors) == set(KEYS)
    assert stored.overall == pytest.approx(sum(stored.scores.values()) / 3, abs=1e-9)
    # The halves have equal qualities; the harsh rater makes the first half's raw means lower.
    raw: dict[int, float] = {}
    for judgment in Judgment.objects.filter(campaign=campaign):
        raw.setdefault(judgment.campaign_candidate_id, 0.0)
        raw[judgment.campaign_candidate_id] += judgment.values["fluency"] / 3
    calibrated = {
        row.campaign_candidate_id: row.scores["fluency"]
        for row in CandidateCalibration.objects.filter(campaign=campaign)
    }
    raw_first, raw_second = half_means(raw, items)
    calibrated_first, calibrated_second = half_means(calibrated, items)
    assert raw_second - raw_first > 0.4
    assert abs(calibrated_second - calibrated_first) < 0.5 * (raw_second - raw_first)
    assert summary["questions"]["fluency"]["converged"] is True


def test_excluded_judgments_and_controls_are_left_out_and_resolutions_win():
    campaign, _workers, harsh, items = harsh_campaign(slug="left-out")
    Judgment.objects.filter(participation=harsh).update(is_excluded=True, excluded_by="curator")
    CampaignCandidate.objects.filter(pk=items[0].pk).update(is_control=True)
    CampaignCandidate.objects.filter(pk=items[1].pk).update(resolution={"values": {"fluency": 2.0}})
    summary = calibration_campaign(campaign=campaign)
    # 72 judgments, less the harsh worker's 12 and the two kept ones of the control.
    assert summary["workers"] == 3 and summary["judgments"] == 58
    assert not WorkerSeverity.objects.filter(participation=harsh).exists()
    assert not CandidateCalibration.objects.filter(campaign_candidate=items[0]).exists()
    resolved = CandidateCalibration.objects.get(campaign_candidate=items[1])
    assert resolved.scores["fluency"] == 2.0 and "fluency" not in resolved.standard_errors


def test_a_new_calibration_replaces_the_previous_results():
    campaign, _workers, harsh, _items = harsh_campaign(slug="replaced")
    calibration_campaign(campaign=campaign)
    Judgment.objects.filter(participation=harsh).update(is_excluded=True)
    calibration_campaign(campaign=campaign)
    assert WorkerSeverity.objects.filter(participation__campaign=campaign).count() == 9
    assert not WorkerSeverity.objects.filter(participation=harsh).exists()
    assert CandidateCalibration.objects.filter(campaign=campaign).count() == 24


def test_a_successful_qc_run_queues_a_calibration_run(django_capture_on_commit_callbacks):
    campaign, *_ = harsh_campaign(slug="after-qc")
    run = QCRun.objects.create(campaign=campaign)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        qc_run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == JobStatus.SUCCEEDED, run.error
    queued = CalibrationRun.objects.get(campaign=campaign)
    assert queued.status == JobStatus.QUEUED and queued.qc_run_id == run.pk
    assert len(callbacks) == 1  # the task is published after commit
    executed = calibration_run_execute(run_id=queued.pk)
    assert executed is not None and executed.status == JobStatus.SUCCEEDED, executed.error
    assert set(executed.summary["questions"]) == set(KEYS)
    # A second execution of the same row is refused (claimed atomically).
    assert calibration_run_execute(run_id=queued.pk) is None


def test_a_failed_qc_run_queues_no_calibration():
    campaign, *_ = harsh_campaign(slug="qc-failed")
    run = QCRun.objects.create(campaign=campaign)
    campaign.questions = "not a list"  # the QC run fails on it
    campaign.save()
    qc_run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == JobStatus.FAILED
    assert not CalibrationRun.objects.filter(campaign=campaign).exists()


def test_the_command_prints_one_json_object_with_the_fit_and_the_workers():
    campaign, _workers, _harsh, _items = harsh_campaign(slug="command")
    out = StringIO()
    call_command("calibrate", "command", "--json", "--workers", stdout=out, stderr=StringIO())
    payload = json.loads(out.getvalue())
    assert payload["status"] == "succeeded" and payload["judgments"] == 72
    assert set(payload["questions"]) == set(KEYS)
    assert payload["questions"]["relevance"]["raters"] == 4
    assert payload["severities"]["harsh"]["relevance"]["severity"] > 0
    assert CalibrationRun.objects.get(pk=payload["run"]).campaign == campaign


def test_the_api_shows_the_latest_fit_and_queues_runs(curator_client):
    campaign, _workers, _harsh, _items = harsh_campaign(slug="api")
    url = reverse("annotation_api:calibration", kwargs={"slug": "api"})
    empty = curator_client.get(url).json()
    assert empty == {"campaign": "api", "run": None, "severities": []}
    call_command("calibrate", "api", "--json", stdout=StringIO(), stderr=StringIO())
    body = curator_client.get(url).json()
    assert body["run"]["status"] == "succeeded"
    assert set(body["run"]["summary"]["questions"]) == set(KEYS)
    harsh_rows = [row for row in body["severities"] if row["worker"] == "harsh"]
    assert len(harsh_rows) == 3 and all(row["low"] > 0 for row in harsh_rows)
    runs_url = reverse("annotation_api:calibration-runs", kwargs={"slug": "api"})
    queued = curator_client.post(runs_url)
    assert queued.status_code == 202 and queued.json()["status"] == "queued"
    again = curator_client.post(runs_url)
    assert again.json()["id"] == queued.json()["id"]  # one active run per campaign
    assert Client().get(url).status_code == 403  # anonymous
    assert CalibrationRun.objects.filter(campaign=campaign).count() == 2


def test_a_rerun_on_unchanged_judgments_writes_nothing():
    campaign, *_ = harsh_campaign(slug="unchanged")
    calibration_campaign(campaign=campaign)
    before = {
        row.pk: (row.scores, row.overall, row.computed_at)
        for row in CandidateCalibration.objects.filter(campaign=campaign)
    }
    severities = {
        row.pk: (row.severity, row.standard_error, row.computed_at)
        for row in WorkerSeverity.objects.filter(participation__campaign=campaign)
    }
    # Rewriting every judgment moves its row, so the next read sees them in another order; the
    # fit sorts its ratings, so the estimates are bit-identical and nothing is written.
    Judgment.objects.filter(campaign=campaign).update(server_ms=1)
    calibration_campaign(campaign=campaign)
    assert {
        row.pk: (row.scores, row.overall, row.computed_at)
        for row in CandidateCalibration.objects.filter(campaign=campaign)
    } == before
    assert {
        row.pk: (row.severity, row.standard_error, row.computed_at)
        for row in WorkerSeverity.objects.filter(participation__campaign=campaign)
    } == severities
