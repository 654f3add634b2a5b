"""Quality control: worker statistics, exclusions, QC runs, agreement, the expert review queue
and its audit log."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from annotation.models.campaigns import Campaign, CampaignCandidate
from annotation.models.crowd import Participation
from common.models import Job, user_reference


class WorkerQCStats(models.Model):
    """Per-worker statistics of a campaign, recomputed after submissions and on demand."""

    participation = models.OneToOneField(
        Participation, on_delete=models.CASCADE, related_name="qc_stats"
    )
    judgments = models.PositiveIntegerField(default=0)
    median_seconds_per_candidate = models.FloatField(null=True, blank=True)
    speed_vs_campaign = models.FloatField(null=True, blank=True)
    speed_vs_clip_length = models.FloatField(null=True, blank=True)
    uniform_share = models.FloatField(null=True, blank=True)
    rating_variance = models.FloatField(null=True, blank=True)
    control_items = models.PositiveIntegerField(default=0)
    control_accuracy = models.FloatField(null=True, blank=True)
    agreement = models.FloatField(null=True, blank=True)
    # [{"rule": key, "explanation": text, "numbers": {...}, "action": "exclude"|"flag"}]
    flags = models.JSONField(default=list, blank=True)
    computed_at = models.DateTimeField(default=timezone.now)
    # What the read behind these statistics saw of the worker's judgments: the largest id, how
    # many (all, kept) had an id up to it. The next pass takes the worker's judgments above it as
    # new; if the counts up to it changed (a judgment committed late, erased, excluded or
    # re-included) it takes all of them as new (`annotation.quality.incremental`).
    through_judgment_id = models.BigIntegerField(null=True, blank=True)
    judgments_through = models.PositiveIntegerField(null=True, blank=True)
    kept_through = models.PositiveIntegerField(null=True, blank=True)
    # The running statistics of the judgments up to `through_judgment_id`, which a pass updates
    # from the worker's new judgments only (`annotation.quality.running`): the additive counts
    # (`running.COUNTS` order), the leave-one-out agreement's integer numerators per number of
    # other raters (`running.OTHERS_WIDTH` per count, relative to the candidates' stored
    # `kept_sums`, kept so by aggregation), and, sorted, the server-timed milliseconds and the
    # time-on-clip / clip-length ratios (the two medians). NULL: the next pass reads everything.
    running_counts = ArrayField(models.BigIntegerField(), null=True, blank=True)
    running_agreement = ArrayField(models.BigIntegerField(), null=True, blank=True)
    running_timing_ms = ArrayField(models.IntegerField(), null=True, blank=True)
    running_clip_ratios = ArrayField(models.FloatField(), null=True, blank=True)


class WorkerExclusion(models.Model):
    """An exclusion decision (automatic by rules, or by a curator) and its reversal."""

    participation = models.ForeignKey(
        Participation, on_delete=models.CASCADE, related_name="exclusions"
    )
    rules = models.JSONField(default=list)
    detail = models.JSONField(default=dict, blank=True)
    judgments_excluded = models.PositiveIntegerField(default=0)
    created_by = user_reference()
    created_at = models.DateTimeField(default=timezone.now)
    reversed_by = user_reference()
    reversed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]


class QCRun(Job):
    """A full QC recompute of a campaign (statistics, rules, agreement, review, aggregation)."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="qc_runs")
    requested_by = user_reference()
    summary = models.JSONField(default=dict, blank=True)

    class Meta(Job.Meta):
        ordering = ["-created_at"]


class AgreementSnapshot(models.Model):
    """Krippendorff's alpha (ordinal) of one question at one time, for the history chart."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="agreement")
    question_key = models.CharField(max_length=50)
    alpha_all = models.FloatField(null=True, blank=True)
    alpha_kept = models.FloatField(null=True, blank=True)
    items = models.PositiveIntegerField(default=0)
    judgments = models.PositiveIntegerField(default=0)
    computed_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["campaign_id", "question_key", "-computed_at"]


class ReviewStatus(models.TextChoices):
    OPEN = "open", "Open"
    CLAIMED = "claimed", "Claimed"
    RESOLVED = "resolved", "Resolved"


class ReviewItem(models.Model):
    """A candidate whose kept ratings disagree too much; an expert resolves it."""

    campaign_candidate = models.OneToOneField(
        CampaignCandidate, on_delete=models.CASCADE, related_name="review_item"
    )
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="review_items")
    status = models.CharField(
        max_length=10, choices=ReviewStatus.choices, default=ReviewStatus.OPEN, db_index=True
    )
    rating_range = models.PositiveSmallIntegerField()
    # Higher first: the worst disagreement is reviewed first.
    priority = models.FloatField(default=0.0, db_index=True)
    claimed_by = user_reference()
    claimed_at = models.DateTimeField(null=True, blank=True)
    resolved_by = user_reference()
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-priority", "id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status=ReviewStatus.CLAIMED) | Q(claimed_by__isnull=False),
                name="review_claimed_has_owner",
            ),
        ]


class ReviewAction(models.TextChoices):
    CLAIM = "claim", "Claimed"
    RELEASE = "release", "Released the claim"
    SET_RATINGS = "set_ratings", "Set final ratings"
    EXCLUDE_JUDGMENT = "exclude_judgment", "Excluded a judgment"
    DROP = "drop", "Dropped the candidate from releases"
    UNDO = "undo", "Undid a decision"
    EXCLUDE_WORKER = "exclude_worker", "Excluded a worker"
    INCLUDE_WORKER = "include_worker", "Re-included a worker"
    ERASE_PARTICIPANT = "erase_participant", "Erased a participant"


class AuditEntry(models.Model):
    """Every curator decision: who, when, what it was before and after. Undo adds an entry."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="audit_entries")
    review_item = models.ForeignKey(
        ReviewItem, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_entries"
    )
    actor = user_reference()
    action = models.CharField(max_length=20, choices=ReviewAction.choices)
    target = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="What was acted on, e.g. judgment:123 or worker:45.",
    )
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    note = models.TextField(blank=True, default="")
    undoes = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="undone_by"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
