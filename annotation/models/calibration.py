"""Rater-severity calibration: the runs and what they estimate per worker and per candidate."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from annotation.models.campaigns import Campaign, CampaignCandidate
from annotation.models.crowd import Participation
from annotation.models.quality import QCRun
from common.models import Job, user_reference


class CalibrationRun(Job):
    """A rater-severity calibration of a campaign (`annotation.quality.calibration_job`), queued
    after every successful QC run and on demand; `summary` holds the model and its fit statistics
    per question."""

    campaign = models.ForeignKey(
        Campaign, on_delete=models.CASCADE, related_name="calibration_runs"
    )
    qc_run = models.ForeignKey(
        QCRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="calibration_runs"
    )
    requested_by = user_reference()
    summary = models.JSONField(default=dict, blank=True)

    class Meta(Job.Meta):
        ordering = ["-created_at"]


class CalibrationOutput(models.Model):
    """What a calibration stores: the run that last changed the row, and when."""

    # The run that last changed these values. Not indexed, so rewriting the row changes no index
    # and PostgreSQL updates it in place (HOT).
    run = models.ForeignKey(
        CalibrationRun,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True


class WorkerSeverity(CalibrationOutput):
    """A worker's severity on one question from the latest calibration (logit units; > 0 is
    harsher than the average rater of the campaign), with its standard error and Rasch fit."""

    participation = models.ForeignKey(
        Participation, on_delete=models.CASCADE, related_name="severities"
    )
    question_key = models.CharField(max_length=50)
    severity = models.FloatField()
    standard_error = models.FloatField()
    judgments = models.PositiveIntegerField()
    infit = models.FloatField(null=True, blank=True)
    outfit = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["participation_id", "question_key"]
        constraints = [
            models.UniqueConstraint(
                fields=["participation", "question_key"], name="worker_severity_unique"
            ),
        ]


class CandidateCalibration(CalibrationOutput):
    """A candidate's calibrated scores from the latest calibration: per question the expected
    rating of an average rater (1..5) and its standard error, the latent quality (logits), and
    the calibrated overall (the overall question's score, else the mean over the questions)."""

    campaign = models.ForeignKey(
        Campaign, on_delete=models.CASCADE, related_name="candidate_calibrations"
    )
    campaign_candidate = models.OneToOneField(
        CampaignCandidate, on_delete=models.CASCADE, related_name="calibration"
    )
    scores = models.JSONField(default=dict)
    standard_errors = models.JSONField(default=dict)
    quality = models.JSONField(default=dict)
    overall = models.FloatField(null=True, blank=True)
