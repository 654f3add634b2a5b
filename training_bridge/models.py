"""Training runs of the Rigel metric on a release, scoring requests, and the retraining schedule's
state.

A `TrainingRun` is a `common.models.Job` driven by a Celery chain of four steps (teacher pass,
Phase 1, Phase 2, evaluation). Each step claims the row (queued -> running), runs, records its result
and puts the row back to queued for the next step, so a run waiting between steps is never mistaken
for an orphan, and a step's message redelivered later finds its work done and does nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q

from common.models import Job, JobStatus, user_reference

STEP_NAMES = ("teacher", "phase1", "phase2", "evaluate")


class TrainingStep(models.TextChoices):
    NONE = "", "Not started"
    TEACHER = "teacher", "Teacher pass"
    PHASE1 = "phase1", "Phase 1: head distillation"
    PHASE2 = "phase2", "Phase 2: LoRA adaptation"
    EVALUATE = "evaluate", "Evaluation"


class TrainingAblation(models.TextChoices):
    FULL = "full", "Full method (Phase 1 + Phase 2, scoring head)"
    LM_HEAD = "lm_head", "LM head instead of the scoring head"
    PHASE1_ONLY = "phase1_only", "Phase 1 only (no Phase 2)"
    RANDOM_HEAD = "random_head", "Phase 2 from a random head (no Phase 1)"
    KL_LOSS = "kl_loss", "Phase 1 with KL divergence instead of EMD"


class TrainingTrigger(models.TextChoices):
    DASHBOARD = "dashboard", "Dashboard"
    API = "api", "API"
    COMMAND = "command", "Command line"
    SCHEDULE = "schedule", "Scheduled retraining"


class TrainingRun(Job):
    release = models.ForeignKey(
        "export.Release", on_delete=models.PROTECT, related_name="training_runs"
    )
    name = models.CharField(max_length=200, blank=True, default="")
    backbone = models.CharField(max_length=500)
    device = models.CharField(max_length=20, default="cpu")
    ablation = models.CharField(
        max_length=20, choices=TrainingAblation.choices, default=TrainingAblation.FULL
    )
    reference_free = models.BooleanField(default=False)
    # Every other Rigel setting (training_bridge.rigel.config.RigelConfig), as given at creation.
    hyperparameters = models.JSONField(default=dict, blank=True)
    # torchrun processes for the teacher pass and Phase 2 (one per GPU); 1 = a plain process.
    processes = models.PositiveSmallIntegerField(default=1)
    trigger = models.CharField(
        max_length=12, choices=TrainingTrigger.choices, default=TrainingTrigger.DASHBOARD
    )
    created_by = user_reference()

    # Where the run is.
    phase = models.CharField(
        max_length=10, choices=TrainingStep.choices, blank=True, default=TrainingStep.NONE
    )
    completed_steps = models.JSONField(default=list, blank=True)
    step_results = models.JSONField(default=dict, blank=True)
    # The latest figures, for lists; the full curves are in `history`.
    epoch = models.PositiveIntegerField(default=0)
    step = models.PositiveIntegerField(default=0)
    loss = models.FloatField(null=True, blank=True)
    validation_tau = models.FloatField(null=True, blank=True)
    # [{"phase": "phase1", "epoch": 3, "loss": .., "validation_tau": ..}, {"phase": "phase2",
    #   "step": 10, "loss": ..}, ...]
    history = models.JSONField(default=list, blank=True)
    # Outcomes.
    # The results: the test split's Rigel row {"test": {"kendall_b": ..}}; empty when the release
    # has no test split (the validation split only chose Phase 1's epoch: see `evaluation`).
    metrics = models.JSONField(default=dict, blank=True)
    evaluation = models.JSONField(default=dict, blank=True)  # the side-by-side table
    artifacts = models.JSONField(default=dict, blank=True)  # name -> storage key
    # The resume point: {"phase2": {"key": "<storage key>", "step": 150}}.
    checkpoint = models.JSONField(default=dict, blank=True)
    log_key = models.CharField(max_length=300, blank=True, default="")
    log_tail = models.TextField(blank=True, default="")
    # Identifies the Celery chain currently allowed to drive the run; a resume issues a new one,
    # so messages of an older chain (redelivered after a crash) do nothing.
    chain_token = models.CharField(max_length=32, blank=True, default="")

    class Meta(Job.Meta):
        constraints = [
            *Job.Meta.constraints,
            models.CheckConstraint(condition=~Q(backbone=""), name="training_run_backbone_set"),
            models.CheckConstraint(
                condition=Q(processes__gte=1), name="training_run_processes_min"
            ),
        ]

    def __str__(self) -> str:
        return f"training run {self.pk} on release {self.release_id}"

    @property
    def storage_prefix(self) -> str:
        return f"training/runs/{self.pk}"

    @property
    def can_cancel(self) -> bool:
        return self.status in (JobStatus.QUEUED, JobStatus.RUNNING) and not self.cancel_requested

    @property
    def has_checkpoint(self) -> bool:
        """Something to resume from: a finished step, or a checkpoint of a running one."""
        return bool(self.completed_steps) or any(
            bool(pointer) for pointer in (self.checkpoint or {}).values()
        )

    @property
    def can_resume(self) -> bool:
        """What the page offers: resuming a failed or cancelled run that saved a checkpoint (the
        service also re-queues one without, which then starts from the beginning)."""
        return self.status in (JobStatus.FAILED, JobStatus.CANCELLED) and self.has_checkpoint

    @property
    def error_reason(self) -> str:
        """The error in one line: its first (the step and the exception's message), shortened;
        the traceback below it is folded away on the page."""
        first = next((line.strip() for line in (self.error or "").splitlines() if line.strip()), "")
        return first if len(first) <= 240 else first[:239] + "…"

    @property
    def error_has_details(self) -> bool:
        return self.error.strip() != self.error_reason

    @property
    def can_score(self) -> bool:
        return self.status == JobStatus.SUCCEEDED

    @property
    def remaining_steps(self) -> list[str]:
        done = set(self.completed_steps or [])
        return [name for name in STEP_NAMES if name not in done]

    def result_metric(self, name: str = "kendall_b") -> float | None:
        """A statistic of the run's results (its test split), None without a test split."""
        value: Any = (self.metrics or {}).get("test", {}).get(name)
        return value if isinstance(value, (int, float)) else None

    @property
    def has_no_test_split(self) -> bool:
        """A finished evaluation on a release without a test split: no result figures."""
        evaluation = self.evaluation or {}
        return bool(evaluation.get("splits")) and not evaluation.get("result_split")


class ScoreRequest(Job):
    """A batch of (clip, references, candidate) triples scored by a finished run, on the training
    queue (web processes never load torch)."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="score_requests")
    # [{"clip": "<clip id>", "references": [...] | null, "candidate": "..."}]
    items = models.JSONField(default=list)
    scores = models.JSONField(default=list, blank=True)
    created_by = user_reference()

    def __str__(self) -> str:
        return f"score request {self.pk} ({len(self.items)} items, run {self.run_id})"


class RetrainingState(models.Model):
    """The one row that serialises scheduled retraining (locked with SELECT ... FOR UPDATE), and
    remembers the release it is waiting for."""

    singleton = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    pending_release = models.ForeignKey(
        "export.Release", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_run = models.ForeignKey(
        TrainingRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_outcome = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(singleton=1), name="retraining_state_singleton")
        ]

    def __str__(self) -> str:
        return "retraining state"


class RigelEvaluation(Job):
    """`evaluate_rigel` as a job: one or more finished runs scored on a benchmark campaign under the
    paper's protocols (and FOIL), with the standard metrics in the same table. Runs on the
    `training` queue; the result is the command's JSON."""

    runs = models.JSONField(default=list)  # training run ids, in table order
    campaign = models.ForeignKey(
        "annotation.Campaign", on_delete=models.PROTECT, related_name="rigel_evaluations"
    )
    protocols = models.JSONField(default=list)  # "reference-free", "1-ref", "all-refs", "foil"
    correlation = models.CharField(max_length=10, default="emscore")  # or "default"
    metrics = models.JSONField(default=list, blank=True)  # standard metrics beside Rigel
    foil_seed = models.BigIntegerField(default=0)
    # A user-supplied FOIL file (JSON Lines), stored; empty: foils generated from the campaign.
    foil_key = models.CharField(max_length=300, blank=True, default="")
    result = models.JSONField(default=dict, blank=True)
    created_by = user_reference()

    def __str__(self) -> str:
        return f"Rigel evaluation {self.pk} (runs {self.runs} on campaign {self.campaign_id})"


class MetricEvaluation(models.Model):
    """A caption metric fitted on one split of a release and evaluated on another (`manage.py
    fit_metric`): Redemption Score's fusion weights, or any metric's calibration onto the human
    scale (`training_bridge.metrics.fitting`). The fitted parameters are stored with the figures
    they produced, so a table row can always say what it was fitted on."""

    release = models.ForeignKey(
        "export.Release", on_delete=models.PROTECT, related_name="metric_evaluations"
    )
    metric = models.CharField(max_length=50)
    train_split = models.CharField(max_length=20)
    test_split = models.CharField(max_length=20)
    reference_count = models.PositiveSmallIntegerField(null=True, blank=True)  # None: all
    metric_settings = models.JSONField(default=dict, blank=True)  # the plug-in's settings
    # {"kind": "fusion", "alpha": .., "beta": .., "gamma": .., "lambda": .., ...} or
    # {"kind": "affine", "slope": .., "intercept": ..}
    fitted = models.JSONField(default=dict)
    # {"train": {kendall_b, ...}, "test": {...}, "leakage": {"shared_clips": 0}, ...}
    result = models.JSONField(default=dict)
    created_by = user_reference()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(train_split=models.F("test_split")),
                name="metric_evaluation_distinct_splits",
            )
        ]

    def __str__(self) -> str:
        return (
            f"{self.metric} fitted on {self.train_split}, evaluated on {self.test_split} of "
            f"release {self.release_id}"
        )


class MetricBoardTable(models.Model):
    """One metrics table saved by `evaluate_metrics --save`: every metric's correlation row on a
    campaign's judgments under one protocol and reference count. The Metrics page shows the
    latest per (campaign, protocol, reference count) beside the published figures."""

    campaign = models.ForeignKey(
        "annotation.Campaign", on_delete=models.CASCADE, related_name="metric_board_tables"
    )
    protocol = models.CharField(max_length=20)  # "default" or "emscore"
    reference_count = models.PositiveSmallIntegerField(null=True, blank=True)  # None: all
    candidates = models.PositiveIntegerField()
    references_per_candidate = models.PositiveSmallIntegerField(null=True, blank=True)
    table = models.JSONField()  # {metric: {kendall_b, kendall_c, spearman, pearson[, unavailable]}}
    settings = models.JSONField(default=dict, blank=True)  # the --set settings, for provenance
    # The generative judges' answers per campaign candidate id:
    # {"<id>": {metric: {"score", "explanation": {criterion: text} | null, "answer"}}}
    explanations = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"metrics table {self.pk} ({self.campaign_id}, {self.protocol})"
