"""Shared model pieces: the status fields every long job carries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


def user_reference() -> models.ForeignKey[Any, Any]:
    """The user who asked for or did something (requested, created, claimed, resolved): optional,
    set to NULL when that user is deleted so the record outlives the account, and no reverse
    accessor on the user."""
    return models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_JOB_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)
FINISHED_JOB_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class JobQuerySet(models.QuerySet):
    def active(self) -> JobQuerySet:
        return self.filter(status__in=ACTIVE_JOB_STATUSES)

    def orphaned(self, *, now: Any = None) -> JobQuerySet:
        """Running jobs whose worker stopped sending heartbeats (killed, lost, out of memory)."""
        now = now or timezone.now()
        cutoff = now - timedelta(seconds=settings.LEPUS_JOB_HEARTBEAT_TIMEOUT)
        return self.filter(status=JobStatus.RUNNING, heartbeat_at__lt=cutoff)


class Job(models.Model):
    """Status, progress and error of a long job run by a Celery task.

    Claim with `common.jobs.job_claim` (a conditional UPDATE), report with `job_progress`, finish with
    `job_succeed` / `job_fail`. A heartbeat lets `common.jobs.jobs_reap_orphans` spot a dead worker.
    """

    status = models.CharField(
        max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True
    )
    progress = models.FloatField(default=0.0)
    progress_message = models.CharField(max_length=300, blank=True, default="")
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    worker_hostname = models.CharField(max_length=200, blank=True, default="")
    task_id = models.CharField(max_length=64, blank=True, default="")
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        abstract = True
        # Newest first; the id orders jobs created in the same instant.
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(progress__gte=0.0) & models.Q(progress__lte=1.0),
                name="%(app_label)s_%(class)s_progress_range",
            )
        ]

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_JOB_STATUSES

    @property
    def progress_percent(self) -> int:
        return int(round(max(0.0, min(1.0, self.progress)) * 100))


# --- Webhooks (common.webhooks; docs/webhooks.md) ------------------------------------------------
# Lowest layer so annotation, export and training_bridge can all emit. Campaigns are referenced by
# id only (common must not import annotation).


class WebhookEndpoint(models.Model):
    """A curator's receiver URL, global (campaign_id null) or for one campaign."""

    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True)
    campaign_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    events = models.JSONField(default=list, blank=True)  # empty: every event
    secret = models.CharField(max_length=100)
    previous_secret = models.CharField(max_length=100, blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.url


class WebhookEvent(models.Model):
    """The outbox: one row per emitted event, written in the emitter's transaction."""

    id = models.UUIDField(primary_key=True)
    event = models.CharField(max_length=64, db_index=True)
    campaign_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class WebhookDelivery(models.Model):
    """One event to one endpoint: its status, attempts, last response code and timing."""

    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(
        max_length=16, choices=WebhookDeliveryStatus.choices, default=WebhookDeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["event", "endpoint"], name="webhook_delivery_once")
        ]
