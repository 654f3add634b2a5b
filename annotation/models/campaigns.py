"""Campaigns and what they judge: the candidates and clips of a campaign.

Counters that the assignment engine relies on (`CampaignCandidate.slots_taken`,
`CampaignClip.open_slots`) are updated with F() in short transactions; the database constraints below
are the last line of defence against over-assignment and repeated clips.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from annotation.questions import Rubric
from common.models import user_reference
from datasets_app.models import CandidateCaption, Clip


class CampaignStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused"
    CLOSED = "closed", "Closed"


class ErasureMode(models.TextChoices):
    DELETE = "delete", "Delete the participant's judgments"
    PSEUDONYMISE = "pseudonymise", "Keep the judgments under a random pseudonym"


class Campaign(models.Model):
    """What is asked, of which candidates, how often, and under which quality rules.

    `questions` is a list of {"key", "label", "help", "levels": [{"value", "label", "description"}]};
    see `annotation.questions.default_questions()` for the three criteria of the Rigel paper.
    `rubric` says whose words describe the levels (`annotation.questions.Rubric`); the levels in
    `questions` are always that rubric's (`annotation.crowd.services.campaign_questions.questions_clean`).
    """

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    instructions = models.TextField(blank=True, default="")
    status = models.CharField(
        max_length=10, choices=CampaignStatus.choices, default=CampaignStatus.ACTIVE, db_index=True
    )
    questions = models.JSONField(default=list)
    # Campaigns made before the choice existed keep the paper's rubric (migration 0014), imported
    # ones are marked imported; new campaigns describe each question's levels on their own.
    rubric = models.CharField(
        max_length=20,
        choices=Rubric.choices,
        default=Rubric.PER_CRITERION,
        db_default=Rubric.PER_CRITERION,
    )
    # Key of an explicit overall question; empty means "overall = mean of the questions".
    overall_question_key = models.CharField(max_length=50, blank=True, default="")
    judgments_per_candidate = models.PositiveSmallIntegerField(default=3)
    # How many judgments a candidate gets (issue 28; annotation.allocation): {} is the
    # fixed policy (`judgments_per_candidate` each), else an `AdaptivePolicy.as_dict()`.
    allocation = models.JSONField(default=dict, blank=True, db_default={})
    # A metric whose scores join the adaptive "unsettled" rule and the campaign page's
    # metric-vs-crowd agreement: "" (none), "rigel-run:<TrainingRun id>" or "plugin:<name>".
    # A string, not a foreign key: annotation sits below training_bridge (docs/architecture.md).
    metric = models.CharField(max_length=100, blank=True, default="", db_default="")
    reference_free = models.BooleanField(default=False)
    lease_seconds = models.PositiveIntegerField(default=900)
    min_seconds_on_clip = models.PositiveIntegerField(default=0)
    # A free-text reason is required for any rating at or below this value (None: never).
    reason_required_at_or_below = models.PositiveSmallIntegerField(null=True, blank=True)
    max_assignments_per_worker = models.PositiveIntegerField(null=True, blank=True)
    # Test-retest: this share of a worker's submitted clips is served to them again later in the
    # session, unannounced, at least `retest_min_gap` clips after the first time (0 = off). The
    # second ratings go to `RepeatJudgment`, never to `Judgment`.
    retest_share = models.FloatField(default=0.0, db_default=0.0)
    retest_min_gap = models.PositiveSmallIntegerField(default=3, db_default=3)
    # Control items: share of assignments that carry one, and which kinds (see annotation QC).
    control_rate = models.FloatField(default=0.0)
    control_settings = models.JSONField(default=dict, blank=True)
    qc_rules = models.JSONField(default=dict, blank=True)
    review_range_threshold = models.PositiveSmallIntegerField(default=3)
    pay_per_assignment = models.DecimalField(max_digits=8, decimal_places=2, default=0)
    currency = models.CharField(max_length=3, default="GBP")
    completion_code = models.CharField(max_length=100, blank=True, default="")
    redirect_url = models.URLField(max_length=500, blank=True, default="")
    # What a worker excluded by quality control gets instead (Prolific's "screened out" completion
    # code and/or its URL; MTurk workers are told to return the HIT).
    screen_out_code = models.CharField(max_length=100, blank=True, default="", db_default="")
    screen_out_redirect_url = models.URLField(max_length=500, blank=True, default="", db_default="")
    # Optional binding to one crowd-platform study: when set, joins through that platform must
    # carry this study / HIT id, and joins through the other crowd platform are refused.
    # (db_default: rows written by raw SQL, e.g. the benchmarks' bulk loaders, need no value.)
    prolific_study_id = models.CharField(max_length=24, blank=True, default="", db_default="")
    mturk_hit_id = models.CharField(max_length=64, blank=True, default="", db_default="")
    # What erasing a participant does to their judgments (stated in the consent text; see
    # docs/privacy.md): ids and free text always go.
    erasure_mode = models.CharField(
        max_length=12,
        choices=ErasureMode.choices,
        default=ErasureMode.DELETE,
        db_default=ErasureMode.DELETE,
    )
    # Judgments of imported campaigns come from files (e.g. VATEX-EVAL), not from the crowd.
    is_imported = models.BooleanField(default=False)
    selection = models.JSONField(
        default=dict, blank=True, help_text="How the candidates were selected, for the record."
    )
    created_by = user_reference()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(judgments_per_candidate__gte=1) & Q(judgments_per_candidate__lte=100),
                name="campaign_quota_range",
            ),
            models.CheckConstraint(
                condition=Q(control_rate__gte=0) & Q(control_rate__lte=1),
                name="campaign_control_rate_range",
            ),
            models.CheckConstraint(condition=Q(lease_seconds__gte=30), name="campaign_lease_min"),
            models.CheckConstraint(
                condition=Q(retest_share__gte=0) & Q(retest_share__lte=0.5),
                name="campaign_retest_share_range",
            ),
            models.CheckConstraint(
                condition=Q(retest_min_gap__gte=1), name="campaign_retest_gap_min"
            ),
            models.CheckConstraint(
                condition=Q(review_range_threshold__gte=1), name="campaign_review_threshold_min"
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def question_keys(self) -> list[str]:
        return [question["key"] for question in self.questions]


class ReviewState(models.TextChoices):
    NONE = "", "Not in review"
    OPEN = "open", "Waiting for review"
    CLAIMED = "claimed", "Being reviewed"
    RESOLVED = "resolved", "Resolved by an expert"


class StopReason(models.TextChoices):
    OPEN = "", "Still wants judgments"
    SETTLED = "settled", "Settled: its raters agree"
    MAXIMUM = "maximum", "Reached the maximum"
    REVIEW = "review", "Sent to expert review"


class CampaignCandidate(models.Model):
    """A candidate inside a campaign: its quota, its slot counter and its aggregate.

    `slots_taken` counts live assignment slots plus kept (not excluded) judgments; it never exceeds
    `quota`. The aggregate fields are written by the aggregation service only.
    """

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="items")
    candidate = models.ForeignKey(
        CandidateCaption, on_delete=models.CASCADE, related_name="campaign_items"
    )
    clip = models.ForeignKey(Clip, on_delete=models.CASCADE, related_name="+")
    quota = models.PositiveSmallIntegerField()
    slots_taken = models.PositiveSmallIntegerField(default=0)
    is_control = models.BooleanField(default=False)
    # Aggregate (written by annotation.crowd.services aggregation; always consistent after a recompute).
    judgments_total = models.PositiveIntegerField(default=0)
    kept_judgments = models.PositiveIntegerField(default=0)
    # Per question (`Campaign.question_keys` order): the sum and the count of the kept answered
    # ratings (1..5) as the last aggregation read them, integers. The after-submission pass reads
    # them for the leave-one-out agreement instead of summing the judgments
    # (`annotation.quality.candidate_sums.candidate_sums_load`). NULL (never aggregated since they
    # exist) or of another length than the questions: the pass sums the judgments instead.
    kept_sums = ArrayField(models.IntegerField(), null=True, blank=True)
    kept_counts = ArrayField(models.IntegerField(), null=True, blank=True)
    means = models.JSONField(default=dict, blank=True)
    overall = models.FloatField(null=True, blank=True)
    normalized = models.FloatField(null=True, blank=True)
    training_class = models.PositiveSmallIntegerField(null=True, blank=True)
    rating_range = models.PositiveSmallIntegerField(null=True, blank=True)
    # Allocation (issue 28): why the candidate stopped getting judgments ("" while it still
    # wants more; settled, maximum or review) and the rules that opened slots beyond the policy's
    # minimum (a list of "range", "standard_error", "metric", each once).
    stop_reason = models.CharField(
        max_length=10, choices=StopReason.choices, blank=True, default="", db_default=""
    )
    opened_by = models.JSONField(default=list, blank=True, db_default=[])
    # The campaign metric's score on the 1..K rating scale and its uncertainty (the spread of the
    # metric's K-way distribution, same scale); None until the scoring job has run.
    metric_score = models.FloatField(null=True, blank=True)
    metric_uncertainty = models.FloatField(null=True, blank=True)
    # Not indexed on purpose: aggregation rewrites these columns for whole campaigns, and with
    # no index on any column it writes, PostgreSQL updates rows in place (HOT) instead of adding
    # an entry to every index of the table for every row (see migration 0003 and
    # docs/quality.md). Filter finalised candidates through the campaign index.
    is_finalised = models.BooleanField(default=False)
    finalised_at = models.DateTimeField(null=True, blank=True)
    review_state = models.CharField(
        max_length=10, choices=ReviewState.choices, blank=True, default=ReviewState.NONE
    )
    # An expert resolution: {"values": {"<key>": float}}; overrides the mean of kept judgments.
    resolution = models.JSONField(default=dict, blank=True)
    dropped = models.BooleanField(
        default=False, help_text="Dropped by an expert: never enters a release."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "candidate"], name="campaign_candidate_unique"
            ),
            models.CheckConstraint(
                condition=Q(slots_taken__lte=F("quota")),
                name="campaign_candidate_slots_within_quota",
            ),
            models.CheckConstraint(condition=Q(quota__gte=1), name="campaign_candidate_quota_min"),
            models.CheckConstraint(
                condition=Q(normalized__isnull=True)
                | (Q(normalized__gte=0) & Q(normalized__lte=1)),
                name="campaign_candidate_normalized_range",
            ),
        ]
        indexes = [
            models.Index(fields=["campaign", "clip"], name="campaign_candidate_clip"),
        ]

    def __str__(self) -> str:
        return f"{self.campaign_id}:{self.candidate_id}"

    @property
    def open_slots(self) -> int:
        return self.quota - self.slots_taken


class CampaignClip(models.Model):
    """Per campaign and clip: how many judgment slots are still open, so the engine can serve
    nearly complete clips first with one indexed query."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="clips")
    clip = models.ForeignKey(Clip, on_delete=models.CASCADE, related_name="+")
    candidates = models.PositiveIntegerField(default=0)
    open_slots = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "clip"], name="campaign_clip_unique"),
            models.CheckConstraint(
                condition=Q(open_slots__gte=0), name="campaign_clip_open_slots_nonnegative"
            ),
        ]
        indexes = [
            # The claim's ORDER BY open_slots, id LIMIT 1: with the id in the index the scan stops
            # at the first clip it can lock instead of sorting every clip with equal open_slots.
            models.Index(fields=["campaign", "open_slots", "id"], name="campaign_clip_claim_order"),
        ]
