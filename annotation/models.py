"""Campaigns, workers, assignments, judgments, quality control and expert review.

Counters that the assignment engine relies on (`CampaignCandidate.slots_taken`,
`CampaignClip.open_slots`) are updated with F() in short transactions; the database constraints below
are the last line of defence against over-assignment and repeated clips.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from annotation.questions import Rubric
from common.models import Job
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
    `questions` are always that rubric's (`annotation.services.campaigns.questions_clean`).
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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
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
    # Aggregate (written by annotation.services aggregation; always consistent after a recompute).
    judgments_total = models.PositiveIntegerField(default=0)
    kept_judgments = models.PositiveIntegerField(default=0)
    means = models.JSONField(default=dict, blank=True)
    overall = models.FloatField(null=True, blank=True)
    normalized = models.FloatField(null=True, blank=True)
    training_class = models.PositiveSmallIntegerField(null=True, blank=True)
    rating_range = models.PositiveSmallIntegerField(null=True, blank=True)
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


class Platform(models.TextChoices):
    PROLIFIC = "prolific", "Prolific"
    MTURK = "mturk", "Amazon Mechanical Turk"
    INVITE = "invite", "Invite link"
    IMPORTED = "imported", "Imported rater slot (not a person)"
    # A participant erased under a pseudonymising campaign: a random id, no platform id.
    ERASED = "erased", "Erased participant (pseudonym)"


class Worker(models.Model):
    """A crowd worker identity on one platform. The same external id always maps to the same row.
    Imported rater slots (e.g. VATEX-EVAL's three columns) are `Platform.IMPORTED`, never people."""

    platform = models.CharField(max_length=10, choices=Platform.choices)
    external_id = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["platform", "external_id"], name="worker_platform_external_unique"
            ),
            models.CheckConstraint(condition=~Q(external_id=""), name="worker_external_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.platform}:{self.external_id}"

    @property
    def is_imported(self) -> bool:
        return self.platform == Platform.IMPORTED


class ParticipationStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused (no new assignments)"
    EXCLUDED = "excluded", "Excluded by quality control"


class Participation(models.Model):
    """A worker inside one campaign. The worker token (`Authorization: Worker <token>`) identifies a
    participation; only its sha256 is stored. The token expires `LEPUS_WORKER_TOKEN_TTL` seconds
    after the later of `token_renewed_at` (issue or re-join) and `last_seen_at` (next, submit); an
    expired token is replaced by one of the next `token_generation` at the next join."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="participations")
    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="participations")
    token_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)
    token_generation = models.PositiveIntegerField(default=0, db_default=0)
    token_renewed_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=10,
        choices=ParticipationStatus.choices,
        default=ParticipationStatus.ACTIVE,
        db_index=True,
    )
    platform_data = models.JSONField(
        default=dict, blank=True, help_text="study/session or assignment/hit ids of the platform."
    )
    # sha256 of the browser key the rating page sent at the first join ("" when none was sent):
    # only a join from that browser gets the participation's token (docs/crowd-flow.md).
    browser_key_hash = models.CharField(max_length=64, blank=True, default="", db_default="")
    consented_at = models.DateTimeField(null=True, blank=True)
    joined_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    assignments_submitted = models.PositiveIntegerField(default=0)
    active_ms_total = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "worker"], name="participation_campaign_worker_unique"
            ),
        ]
        # The data browser's workers by joining time (joined_at never changes: no HOT cost).
        indexes = [models.Index(fields=["joined_at", "id"], name="participation_joined_order")]

    def __str__(self) -> str:
        return f"{self.worker} in {self.campaign_id}"

    @property
    def may_receive_work(self) -> bool:
        return self.status == ParticipationStatus.ACTIVE


class BarReason(models.TextChoices):
    EXCLUDED = "excluded", "Excluded by quality control, then erased"
    ERASED = "erased", "Erased"


class BarredIdentity(models.Model):
    """A person who may not join the campaign again, kept as a keyed hash of their normalised
    (platform, id) — never the id — once their participation is erased (docs/privacy.md,
    `annotation.services.barring`). Goes with the campaign."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    digest = models.CharField(max_length=64)
    reason = models.CharField(max_length=10, choices=BarReason.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "digest"], name="barred_identity_campaign_digest_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reason} in {self.campaign_id}"


class AssignmentStatus(models.TextChoices):
    LIVE = "live", "Live (leased)"
    SUBMITTED = "submitted", "Submitted"
    EXPIRED = "expired", "Expired (slots returned)"


class Assignment(models.Model):
    """One clip with the campaign's candidates of that clip that still needed judgments when issued.
    A worker gets a clip at most once per campaign (unique constraint)."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="assignments")
    participation = models.ForeignKey(
        Participation, on_delete=models.CASCADE, related_name="assignments"
    )
    clip = models.ForeignKey(Clip, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(
        max_length=10,
        choices=AssignmentStatus.choices,
        default=AssignmentStatus.LIVE,
        db_index=True,
    )
    issued_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    # sha256 of the canonical submission body: a repeated identical submit replays `result`.
    submission_digest = models.CharField(max_length=64, blank=True, default="")
    result = models.JSONField(default=dict, blank=True)
    server_ms = models.BigIntegerField(null=True, blank=True)
    client_active_ms = models.BigIntegerField(null=True, blank=True)
    client_video_played_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["participation", "clip"], name="assignment_worker_clip_unique"
            ),
            # A worker holds at most one live lease per campaign: `next` hands the same one back.
            models.UniqueConstraint(
                fields=["participation"],
                condition=Q(status=AssignmentStatus.LIVE),
                name="assignment_one_live_per_worker",
            ),
        ]
        indexes = [models.Index(fields=["status", "expires_at"], name="assignment_lease")]

    def __str__(self) -> str:
        return f"assignment {self.pk} ({self.status})"


class AssignmentItem(models.Model):
    """A slot: one candidate inside an assignment."""

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="items")
    campaign_candidate = models.ForeignKey(
        CampaignCandidate, on_delete=models.CASCADE, related_name="assignment_items"
    )
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["assignment_id", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["assignment", "campaign_candidate"], name="assignment_item_unique"
            ),
        ]


class Repeat(models.Model):
    """A test-retest lease: a clip the worker already submitted, served to them again with the same
    candidates (`candidate_ids`, campaign candidate ids in the order shown) and not announced.

    The id comes from the assignment id sequence, so the worker API's `assignment_id` is one id
    space and a repeat looks like any other assignment. A repeat takes no quota slot and counts
    toward no payment or limit; its ratings are `RepeatJudgment` rows, which no aggregate reads."""

    id = models.BigIntegerField(primary_key=True)
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="repeats")
    participation = models.ForeignKey(
        Participation, on_delete=models.CASCADE, related_name="repeats"
    )
    original = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="repeats")
    clip = models.ForeignKey(Clip, on_delete=models.CASCADE, related_name="+")
    candidate_ids = models.JSONField(default=list)
    status = models.CharField(
        max_length=10, choices=AssignmentStatus.choices, default=AssignmentStatus.LIVE
    )
    issued_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    submitted_at = models.DateTimeField(null=True, blank=True)
    submission_digest = models.CharField(max_length=64, blank=True, default="")
    result = models.JSONField(default=dict, blank=True)
    server_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            # Each clip is repeated at most once per worker.
            models.UniqueConstraint(fields=["participation", "clip"], name="repeat_worker_clip"),
            models.UniqueConstraint(
                fields=["participation"],
                condition=Q(status=AssignmentStatus.LIVE),
                name="repeat_one_live_per_worker",
            ),
        ]

    def __str__(self) -> str:
        return f"repeat {self.pk} of assignment {self.original_id} ({self.status})"


class RepeatJudgment(models.Model):
    """A worker's second rating of a candidate they rated before (`original`), from a repeat.
    Kept apart from `Judgment` so aggregates, agreement, calibration, review and releases cannot
    count it; only the test-retest consistency reads it."""

    repeat = models.ForeignKey(Repeat, on_delete=models.CASCADE, related_name="judgments")
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    participation = models.ForeignKey(Participation, on_delete=models.CASCADE, related_name="+")
    original = models.ForeignKey("Judgment", on_delete=models.CASCADE, related_name="repeats")
    values = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["repeat", "original"], name="repeat_judgment_unique"),
        ]
        indexes = [
            models.Index(fields=["campaign", "participation"], name="repeat_judgment_worker"),
        ]


class JudgmentSource(models.TextChoices):
    CROWD = "crowd", "Crowd worker"
    IMPORTED = "imported", "Imported from a file"


class JudgmentQuerySet(models.QuerySet):
    def kept(self) -> JudgmentQuerySet:
        return self.filter(is_excluded=False)


class Judgment(models.Model):
    """One worker's ratings of one candidate: `values` = {"<question key>": 1..5}."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="judgments")
    campaign_candidate = models.ForeignKey(
        CampaignCandidate, on_delete=models.CASCADE, related_name="judgments"
    )
    participation = models.ForeignKey(
        Participation, on_delete=models.CASCADE, related_name="judgments"
    )
    assignment = models.ForeignKey(
        Assignment, null=True, blank=True, on_delete=models.SET_NULL, related_name="judgments"
    )
    values = models.JSONField()
    reason = models.TextField(blank=True, default="")
    source = models.CharField(
        max_length=10, choices=JudgmentSource.choices, default=JudgmentSource.CROWD
    )
    # Server-side time on the assignment shared per candidate, and client timing, in ms.
    server_ms = models.BigIntegerField(null=True, blank=True)
    client_active_ms = models.BigIntegerField(null=True, blank=True)
    client_video_played_ms = models.BigIntegerField(null=True, blank=True)
    import_batch = models.ForeignKey(
        "datasets_app.ImportBatch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="judgments",
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Not indexed, so that excluding a judgment can rewrite its row in place (HOT) rather than
    # add an entry to each of the table's indexes (migration 0013, docs/quality.md).
    is_excluded = models.BooleanField(default=False)
    # e.g. "rule:too_fast", "review", "curator"; the numbers behind it in exclusion_detail.
    excluded_by = models.CharField(max_length=50, blank=True, default="")
    exclusion_reason = models.TextField(blank=True, default="")
    exclusion_detail = models.JSONField(default=dict, blank=True)
    excluded_at = models.DateTimeField(null=True, blank=True)

    objects = JudgmentQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["campaign_candidate", "participation"],
                name="judgment_one_per_worker_candidate",
            ),
        ]
        indexes = [
            models.Index(fields=["campaign", "participation"], name="judgment_campaign_worker"),
            # The data browser's judgments by time: keyset pages over (created_at, id).
            models.Index(fields=["created_at", "id"], name="judgment_created_order"),
        ]

    def __str__(self) -> str:
        return f"judgment {self.pk} on {self.campaign_candidate_id}"


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


class WorkerExclusion(models.Model):
    """An exclusion decision (automatic by rules, or by a curator) and its reversal."""

    participation = models.ForeignKey(
        Participation, on_delete=models.CASCADE, related_name="exclusions"
    )
    rules = models.JSONField(default=list)
    detail = models.JSONField(default=dict, blank=True)
    judgments_excluded = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    reversed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reversed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]


class QCRun(Job):
    """A full QC recompute of a campaign (statistics, rules, agreement, review, aggregation)."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="qc_runs")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
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
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
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
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
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
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
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


# --- Uploads on the import page (annotation.imports.uploads) ------------------------------------


class UploadKind(models.TextChoices):
    CANDIDATES = "candidates", "Candidate captions (JSONL or CSV)"
    VATEX = "vatex", "VATEX annotations (JSON)"
    JUDGMENTS = "judgments", "Judgments (JSONL or CSV)"
    VATEX_EVAL = "vatex_eval", "VATEX-EVAL judgments (JSON)"
    VIDEOS = "videos", "Video archive (zip or tar of clips)"
    IMAGES = "images", "Still images (zip or tar: one image JSONL and its image files)"


class ImportUpload(Job):
    """A file a curator uploaded on the import page and the Celery job that imports it: stored
    first (`storage_key`), then validated in full and written in one transaction by the same
    importer as the command line. A refused file leaves the job failed with `error` (the command's
    file/line/field message) and `rejection` (those parts apart); nothing is written."""

    kind = models.CharField(max_length=16, choices=UploadKind.choices)
    file_name = models.CharField(max_length=255)
    size = models.BigIntegerField(default=0)
    storage_key = models.CharField(max_length=500)
    campaign_slug = models.CharField(max_length=50, blank=True, default="")
    file_format = models.CharField(max_length=8, blank=True, default="")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The importer's result (ImportResult.as_dict(), or the video jobs an archive queued).
    result = models.JSONField(default=dict, blank=True)
    # {"file", "line", "column", "field", "message"} of a refused file; empty otherwise.
    rejection = models.JSONField(default=dict, blank=True)

    class Meta(Job.Meta):
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"import {self.pk} ({self.kind}, {self.file_name}, {self.status})"

    @property
    def rejection_or_none(self) -> dict[str, object] | None:
        return self.rejection or None
