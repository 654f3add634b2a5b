from __future__ import annotations

from django.contrib import admin

from datasets_app.models import (
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ReferenceCaption,
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
    list_display = ["vatex_id", "youtube_id", "start_seconds", "end_seconds", "status", "duration"]
    list_filter = ["status"]
    search_fields = ["vatex_id", "youtube_id"]
    readonly_fields = ["created_at", "processed_at"]
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
