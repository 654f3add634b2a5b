"""Clips, their reference captions, captioning systems, candidate captions and import batches."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from common.models import Job, user_reference


class CaptioningSystem(models.Model):
    """The model (or person, or process) that produced a candidate caption."""

    name = models.CharField(max_length=200)
    version = models.CharField(max_length=100, blank=True, default="")
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "version"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="system_name_version_unique"),
            models.CheckConstraint(condition=~Q(name=""), name="system_name_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.version}".strip()


class ImportKind(models.TextChoices):
    VATEX = "vatex", "VATEX annotation JSON"
    VATEX_EVAL = "vatex_eval", "VATEX-EVAL judgments"
    CANDIDATES = "candidates", "Generic candidates (JSONL/CSV)"
    JUDGMENTS = "judgments", "Generic judgments (JSONL/CSV)"
    IMAGES = "images", "Still images with captions (JSONL)"


class ImportBatch(models.Model):
    """One imported file. Created in the same transaction as the rows it brings, so a batch exists
    only for a file that was imported whole; the sha256 makes re-imports no-ops."""

    kind = models.CharField(max_length=20, choices=ImportKind.choices)
    file_name = models.CharField(max_length=500)
    sha256 = models.CharField(max_length=64)
    # Campaign slug for judgment imports (the same file may feed two campaigns), else "".
    target = models.CharField(max_length=100, blank=True, default="")
    counts = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "import batches"
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "sha256", "target"], name="import_batch_file_unique"
            ),
            models.CheckConstraint(
                condition=Q(sha256__regex=r"^[0-9a-f]{64}$"), name="import_batch_sha256_hex"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.file_name}"


class ClipStatus(models.TextChoices):
    PENDING = "pending", "No video yet"
    QUEUED = "queued", "Video queued"
    PROCESSING = "processing", "Video processing"
    READY = "ready", "Ready"
    ERROR = "error", "Error"


class ClipModality(models.TextChoices):
    VIDEO = "video", "Video clip"
    IMAGE = "image", "Still image"


class ClipQuerySet(models.QuerySet):
    def servable(self) -> ClipQuerySet:
        """Clips whose processed video (or, for a still image, display image) can be shown to
        workers."""
        return self.filter(status=ClipStatus.READY).filter(
            Q(modality=ClipModality.VIDEO, video_key__gt="")
            | Q(modality=ClipModality.IMAGE, image_key__gt="")
        )


class Clip(models.Model):
    """A VATEX clip: `<youtube id>_<start>_<end>` (split from the right; YouTube ids contain `_`),
    or a still image (`modality` image, the paper's T = 1 input): its `vatex_id` is the image id,
    it has no YouTube id and no window (start = end = 0), its display file is `image_key` and its
    one training frame `<frames_key>/000.jpg`."""

    vatex_id = models.CharField(max_length=200, unique=True)
    # Database defaults too, so rows inserted by SQL that predates still images (bench scripts'
    # COPY) are videos without a display image.
    modality = models.CharField(
        max_length=8,
        choices=ClipModality.choices,
        default=ClipModality.VIDEO,
        db_default=ClipModality.VIDEO,
    )
    youtube_id = models.CharField(max_length=100, blank=True)
    start_seconds = models.FloatField()
    end_seconds = models.FloatField()
    source_key = models.CharField(
        max_length=500,
        blank=True,
        default="",
        help_text="Storage key or local path of the source video.",
    )
    video_key = models.CharField(
        max_length=500,
        blank=True,
        default="",
        help_text="Storage key of the browser-safe H.264/AAC MP4.",
    )
    poster_key = models.CharField(max_length=500, blank=True, default="")
    image_key = models.CharField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text="Storage key of a still image's browser-safe display file (JPEG).",
    )
    frames_key = models.CharField(
        max_length=500,
        blank=True,
        default="",
        help_text="Storage prefix of the sampled training frames.",
    )
    frame_count = models.PositiveIntegerField(default=0)
    duration = models.FloatField(
        null=True, blank=True, help_text="Seconds, of the processed video."
    )
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=ClipStatus.choices, default=ClipStatus.PENDING, db_index=True
    )
    error_reason = models.TextField(blank=True, default="")
    processed_at = models.DateTimeField(null=True, blank=True)
    import_batch = models.ForeignKey(
        ImportBatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="clips"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ClipQuerySet.as_manager()

    class Meta:
        ordering = ["vatex_id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(start_seconds__gte=0), name="clip_start_nonnegative"
            ),
            # A video has a window; a still image has none (0, 0) and no video.
            models.CheckConstraint(
                condition=(
                    Q(modality=ClipModality.VIDEO) & Q(end_seconds__gt=models.F("start_seconds"))
                )
                | (
                    Q(modality=ClipModality.IMAGE)
                    & Q(start_seconds=0)
                    & Q(end_seconds=0)
                    & Q(video_key="")
                ),
                name="clip_window_matches_modality",
            ),
            models.CheckConstraint(condition=~Q(vatex_id=""), name="clip_vatex_id_not_empty"),
            models.CheckConstraint(
                condition=~Q(status=ClipStatus.READY)
                | (Q(modality=ClipModality.VIDEO) & ~Q(video_key=""))
                | (Q(modality=ClipModality.IMAGE) & ~Q(image_key="")),
                name="clip_ready_has_media",
            ),
            models.CheckConstraint(
                condition=Q(modality__in=ClipModality.values), name="clip_modality_known"
            ),
        ]

    def __str__(self) -> str:
        return self.vatex_id

    @property
    def is_image(self) -> bool:
        return self.modality == ClipModality.IMAGE

    @property
    def display_key(self) -> str:
        """Storage key of what a worker is shown: the MP4, or a still image's display file."""
        return self.image_key if self.is_image else self.video_key

    @property
    def is_servable(self) -> bool:
        return self.status == ClipStatus.READY and bool(self.display_key)


class ReferenceCaption(models.Model):
    clip = models.ForeignKey(Clip, on_delete=models.CASCADE, related_name="references")
    position = models.PositiveSmallIntegerField()
    text = models.TextField()
    language = models.CharField(max_length=8, default="en")
    import_batch = models.ForeignKey(ImportBatch, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["clip_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["clip", "position"], name="reference_position_unique"),
            models.CheckConstraint(condition=~Q(text=""), name="reference_text_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.clip_id}#{self.position}: {self.text[:60]}"


class CandidateKind(models.TextChoices):
    MODEL = "model", "Model output"
    CONTROL = "control", "Control item"


class ControlType(models.TextChoices):
    NONE = "", "Not a control"
    REFERENCE = "reference", "A reference shown as a candidate (expected high)"
    OTHER_CLIP = "other_clip", "A caption of another clip (expected low relevance)"
    SHUFFLED = "shuffled", "A word-shuffled caption (expected low fluency)"


class CandidateQuerySet(models.QuerySet):
    def model_outputs(self) -> CandidateQuerySet:
        return self.filter(kind=CandidateKind.MODEL)

    def controls(self) -> CandidateQuerySet:
        return self.filter(kind=CandidateKind.CONTROL)


class CandidateCaption(models.Model):
    """A caption to be judged. `external_id` is the stable identity used by imports (idempotency)
    and exports; model outputs keep their captioning system as provenance."""

    clip = models.ForeignKey(Clip, on_delete=models.CASCADE, related_name="candidates")
    external_id = models.CharField(max_length=300, unique=True)
    text = models.TextField()
    system = models.ForeignKey(
        CaptioningSystem, null=True, blank=True, on_delete=models.PROTECT, related_name="candidates"
    )
    kind = models.CharField(
        max_length=10, choices=CandidateKind.choices, default=CandidateKind.MODEL, db_index=True
    )
    control_type = models.CharField(
        max_length=16, choices=ControlType.choices, blank=True, default=ControlType.NONE
    )
    # For controls: what the control was made from and the rating range expected per question,
    # e.g. {"source": "reference:3", "expected": {"relevance": [4, 5]}}.
    control_spec = models.JSONField(default=dict, blank=True)
    position = models.PositiveSmallIntegerField(
        default=0, help_text="Order within the clip's source."
    )
    import_batch = models.ForeignKey(
        ImportBatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="candidates"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = CandidateQuerySet.as_manager()

    class Meta:
        ordering = ["clip_id", "position", "id"]
        constraints = [
            models.CheckConstraint(condition=~Q(text=""), name="candidate_text_not_empty"),
            models.CheckConstraint(
                condition=(Q(kind=CandidateKind.MODEL) & Q(control_type=""))
                | (Q(kind=CandidateKind.CONTROL) & ~Q(control_type="")),
                name="candidate_control_type_matches_kind",
            ),
        ]
        indexes = [models.Index(fields=["clip", "kind"], name="candidate_clip_kind")]

    def __str__(self) -> str:
        return f"{self.external_id}: {self.text[:60]}"

    @property
    def is_control(self) -> bool:
        return self.kind == CandidateKind.CONTROL


class VideoAttachJob(Job):
    """Processing the videos matched to clips by one `attach_videos` run (a Celery job): for each
    clip, probe, cut, transcode, poster, frames, upload. `done` of `total` clips so far, of which
    `ready` succeeded and `failed` ended in the clip's error state."""

    directory = models.CharField(max_length=1000)
    requested_by = user_reference()
    force = models.BooleanField(default=False)
    clip_ids = models.JSONField(default=list, blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    ready = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    # What matching found: files seen, unmatched files, clips skipped (already ready, in progress).
    summary = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"video job {self.pk} ({self.status}, {self.done}/{self.total})"
