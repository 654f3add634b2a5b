"""The crowd: workers, their participations, assignments, repeats and judgments."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from annotation.models.campaigns import Campaign, CampaignCandidate
from datasets_app.models import Clip


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
    `annotation.crowd.services.barring`). Goes with the campaign."""

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
            # With the id: a worker's judgments above their QC watermark (the after-submission
            # pass's new judgments) are a range of this index, not a scan of their history.
            models.Index(
                fields=["campaign", "participation", "id"], name="judgment_campaign_worker_id"
            ),
            # The data browser's judgments by time: keyset pages over (created_at, id).
            models.Index(fields=["created_at", "id"], name="judgment_created_order"),
        ]

    def __str__(self) -> str:
        return f"judgment {self.pk} on {self.campaign_candidate_id}"
