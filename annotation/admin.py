from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from annotation.crowd.campaign_option_fields import option_form_field
from annotation.crowd.campaign_options import (
    ARGUMENT_FIELDS,
    CAMPAIGN_FIELDS,
    FROZEN_ONCE_RATED,
    KEPT_WHEN_ABSENT,
    OPTION_FIELDS,
)
from annotation.crowd.services.campaign_questions import questions_clean
from annotation.crowd.services.campaigns import (
    CampaignInvalid,
    campaign_create,
    campaign_has_crowd_judgments,
    campaign_slug_clean,
    campaign_update,
    candidates_select,
)
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
from annotation.questions import Rubric
from datasets_app.models import ImportBatch


class CampaignAdminForm(forms.ModelForm):
    """Edits go through `campaign_update` (frozen fields, quota changes with counters)."""

    # The settings' rules (`annotation.crowd.campaign_options`); the admin shows no page help or initial.
    redirect_url = option_form_field("redirect_url", help_text="")
    screen_out_redirect_url = option_form_field("screen_out_redirect_url", help_text="")
    # Absent from a post: the campaign keeps its setting (the model's default when new).
    erasure_mode = option_form_field("erasure_mode", initial=None, label=None, help_text="")
    retest_share = option_form_field("retest_share", initial=None, help_text="")
    retest_min_gap = option_form_field("retest_min_gap", initial=None, help_text="")
    # An imported campaign shows its own rubric here, so every rubric is a choice.
    rubric = forms.ChoiceField(choices=Rubric.choices, required=False)

    class Meta:
        model = Campaign
        fields = list(CAMPAIGN_FIELDS)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for name in KEPT_WHEN_ABSENT:
            if cleaned.get(name) in (None, ""):
                cleaned[name] = getattr(self.instance, name)
        if self.instance.pk and campaign_has_crowd_judgments(campaign=self.instance):
            for name in FROZEN_ONCE_RATED:
                if name in self.changed_data:
                    self.add_error(name, "Cannot change once workers have submitted judgments.")
        if "questions" in self.changed_data and cleaned.get("questions") is not None:
            try:
                cleaned["questions"] = questions_clean(
                    cleaned["questions"], rubric=cleaned.get("rubric") or self.instance.rubric
                )
            except CampaignInvalid as invalid:
                self.add_error("questions", str(invalid))
        return cleaned


class CampaignAdminCreateForm(CampaignAdminForm):
    """Creation goes through `campaign_create`, which selects the candidates."""

    import_batches = forms.ModelMultipleChoiceField(
        queryset=ImportBatch.objects.all(), required=False, help_text="Empty: any."
    )
    systems = forms.CharField(
        required=False, help_text="Captioning system names, comma-separated (empty: any)."
    )
    clip_list = forms.CharField(
        required=False, widget=forms.Textarea, help_text="VATEX clip ids, one per line."
    )
    clip_limit = forms.IntegerField(required=False, min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["questions"].required = False
        self.fields["questions"].help_text = "Empty: the three criteria of the Rigel paper."

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        try:
            campaign_slug_clean(cleaned.get("slug") or "")
        except CampaignInvalid as invalid:
            self.add_error("slug", " ".join(invalid.errors["slug"]))
        try:
            candidates_select(clip_vatex_ids=self.clip_ids() or None)
        except CampaignInvalid as invalid:
            self.add_error("clip_list", " ".join(invalid.errors["clips"]))
        return cleaned

    def clip_ids(self) -> list[str]:
        text = self.cleaned_data.get("clip_list") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def system_names(self) -> list[str]:
        text = self.cleaned_data.get("systems") or ""
        return [name.strip() for name in text.split(",") if name.strip()]


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
    form = CampaignAdminForm

    def get_form(self, request, obj=None, change=False, **kwargs):  # type: ignore[no-untyped-def]
        if obj is None:
            kwargs["form"] = CampaignAdminCreateForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        # Worker links and invites carry the slug: it never changes.
        return ["slug"] if obj is not None else []

    def get_prepopulated_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        return {} if obj is not None else {"slug": ["name"]}

    def save_model(self, request, obj, form, change):  # type: ignore[no-untyped-def]
        options = {
            name: form.cleaned_data[name]
            for name in OPTION_FIELDS
            if name in form.cleaned_data and name in form.changed_data
        }
        if change:
            stored = Campaign.objects.get(pk=obj.pk)
            changes = {
                name: form.cleaned_data[name]
                for name in ARGUMENT_FIELDS
                if name != "slug" and name in form.changed_data
            }
            campaign_update(campaign=stored, **changes, **options)
            return
        campaign = campaign_create(
            slug=form.cleaned_data["slug"],
            name=form.cleaned_data["name"],
            questions=form.cleaned_data.get("questions") or None,
            judgments_per_candidate=form.cleaned_data["judgments_per_candidate"],
            reference_free=form.cleaned_data["reference_free"],
            import_batch_ids=[batch.pk for batch in form.cleaned_data["import_batches"]],
            system_names=form.system_names(),
            clip_vatex_ids=form.clip_ids() or None,
            clip_limit=form.cleaned_data.get("clip_limit"),
            created_by=request.user,
            **options,
        )
        obj.pk = obj.id = campaign.pk
        obj._state.adding = False

    def save_related(self, request, form, formsets, change):  # type: ignore[no-untyped-def]
        # The services saved everything; the form has no many-to-many fields of its own.
        return None


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
