"""Files uploaded on the import page and the jobs that import them."""

from __future__ import annotations

from django.db import models

from common.models import Job, user_reference

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
    requested_by = user_reference()
    # The importer's result (ImportResult.as_dict(), or the video jobs an archive queued).
    result = models.JSONField(default=dict, blank=True)
    # {"file", "line", "column", "field", "message"} of a refused file; empty otherwise.
    rejection = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"import {self.pk} ({self.kind}, {self.file_name}, {self.status})"

    @property
    def rejection_or_none(self) -> dict[str, object] | None:
        return self.rejection or None
