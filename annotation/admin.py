from __future__ import annotations

from django.contrib import admin

from annotation.models import (
    AgreementSnapshot,
    Assignment,
    AssignmentItem,
    AuditEntry,
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    Participation,
    QCRun,
    ReviewItem,
    Worker,
    WorkerExclusion,
    WorkerQCStats,
)


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "name",
        "status",
        "judgments_per_candidate",
        "reference_free",
        "is_imported",
        "created_at",
    ]
    list_filter = ["status", "reference_free", "is_imported"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(CampaignCandidate)
class CampaignCandidateAdmin(admin.ModelAdmin):
    list_display = [
        "campaign",
        "candidate",
        "quota",
        "slots_taken",
        "kept_judgments",
        "overall",
        "review_state",
        "dropped",
        "is_control",
    ]
    list_filter = ["campaign", "review_state", "dropped", "is_control", "is_finalised"]
    raw_id_fields = ["candidate", "clip"]


@admin.register(CampaignClip)
class CampaignClipAdmin(admin.ModelAdmin):
    list_display = ["campaign", "clip", "candidates", "open_slots"]
    list_filter = ["campaign"]
    raw_id_fields = ["clip"]


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ["platform", "external_id", "created_at"]
    list_filter = ["platform"]
    search_fields = ["external_id"]


@admin.register(Participation)
class ParticipationAdmin(admin.ModelAdmin):
    list_display = ["worker", "campaign", "status", "assignments_submitted", "joined_at"]
    list_filter = ["campaign", "status"]
    raw_id_fields = ["worker"]
    exclude = ["token_hash"]


class AssignmentItemInline(admin.TabularInline):
    model = AssignmentItem
    extra = 0
    raw_id_fields = ["campaign_candidate"]


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
    list_display = ["id", "campaign", "participation", "clip", "status", "issued_at", "expires_at"]
    list_filter = ["campaign", "status"]
    raw_id_fields = ["participation", "clip"]
    inlines = [AssignmentItemInline]


@admin.register(Judgment)
class JudgmentAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "campaign",
        "campaign_candidate",
        "participation",
        "values",
        "source",
        "is_excluded",
        "excluded_by",
    ]
    list_filter = ["campaign", "source", "is_excluded"]
    raw_id_fields = ["campaign_candidate", "participation", "assignment", "import_batch"]


@admin.register(WorkerQCStats)
class WorkerQCStatsAdmin(admin.ModelAdmin):
    list_display = [
        "participation",
        "judgments",
        "median_seconds_per_candidate",
        "uniform_share",
        "control_accuracy",
        "agreement",
        "computed_at",
    ]
    raw_id_fields = ["participation"]


@admin.register(WorkerExclusion)
class WorkerExclusionAdmin(admin.ModelAdmin):
    list_display = [
        "participation",
        "rules",
        "judgments_excluded",
        "created_by",
        "created_at",
        "reversed_at",
    ]
    raw_id_fields = ["participation"]


@admin.register(QCRun)
class QCRunAdmin(admin.ModelAdmin):
    list_display = ["id", "campaign", "status", "progress", "created_at", "finished_at"]
    list_filter = ["status"]


@admin.register(AgreementSnapshot)
class AgreementSnapshotAdmin(admin.ModelAdmin):
    list_display = ["campaign", "question_key", "alpha_all", "alpha_kept", "items", "computed_at"]
    list_filter = ["campaign", "question_key"]


@admin.register(ReviewItem)
class ReviewItemAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "campaign",
        "campaign_candidate",
        "status",
        "rating_range",
        "priority",
        "claimed_by",
        "resolved_by",
    ]
    list_filter = ["campaign", "status"]
    raw_id_fields = ["campaign_candidate"]


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "campaign", "actor", "action", "target"]
    list_filter = ["campaign", "action"]
    readonly_fields = [field.name for field in AuditEntry._meta.fields]

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False
