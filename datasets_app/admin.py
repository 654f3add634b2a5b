from __future__ import annotations

from django.contrib import admin

from datasets_app.models import (
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ReferenceCaption,
    VideoAttachJob,
)


class ReferenceInline(admin.TabularInline):
    model = ReferenceCaption
    extra = 0
    fields = ["position", "text", "language"]


class CandidateInline(admin.TabularInline):
    model = CandidateCaption
    extra = 0
    fields = ["external_id", "text", "system", "kind", "control_type"]
    raw_id_fields = ["system"]
    show_change_link = True


@admin.register(Clip)
class ClipAdmin(admin.ModelAdmin):
    list_display = [
        "vatex_id",
        "modality",
        "youtube_id",
        "start_seconds",
        "end_seconds",
        "status",
        "duration",
    ]
    list_filter = ["status", "modality"]

    search_fields = ["vatex_id", "youtube_id"]
    # The pipeline writes the video fields; edited by hand they could serve a file that is not there.
    readonly_fields = [
        "created_at",
        "processed_at",
        "video_key",
        "poster_key",
        "image_key",
        "frames_key",
        "frame_count",
        "duration",
        "width",
        "height",
    ]
    raw_id_fields = ["import_batch"]
    inlines = [ReferenceInline, CandidateInline]


@admin.register(ReferenceCaption)
class ReferenceCaptionAdmin(admin.ModelAdmin):
    list_display = ["clip", "position", "text"]
    search_fields = ["clip__vatex_id", "text"]
    raw_id_fields = ["clip", "import_batch"]


@admin.register(CaptioningSystem)
class CaptioningSystemAdmin(admin.ModelAdmin):
    list_display = ["name", "version", "created_at"]
    search_fields = ["name"]


@admin.register(CandidateCaption)
class CandidateCaptionAdmin(admin.ModelAdmin):
    list_display = ["external_id", "clip", "system", "kind", "control_type", "text"]
    list_filter = ["kind", "control_type", "system"]
    search_fields = ["external_id", "text", "clip__vatex_id"]
    raw_id_fields = ["clip", "system", "import_batch"]


@admin.register(ImportBatch)
class ImportBatchAdmin(admin.ModelAdmin):
    list_display = ["kind", "file_name", "target", "sha256", "created_by", "created_at"]
    list_filter = ["kind"]
    readonly_fields = [
        "kind",
        "file_name",
        "sha256",
        "target",
        "counts",
        "created_by",
        "created_at",
    ]


@admin.register(VideoAttachJob)
class VideoAttachJobAdmin(admin.ModelAdmin):
    list_display = ["pk", "status", "done", "total", "ready", "failed", "directory", "created_at"]
    list_filter = ["status"]
    readonly_fields = [
        "status",
        "progress",
        "progress_message",
        "error",
        "attempts",
        "worker_hostname",
        "task_id",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
        "directory",
        "requested_by",
        "force",
        "clip_ids",
        "total",
        "done",
        "ready",
        "failed",
        "summary",
    ]
