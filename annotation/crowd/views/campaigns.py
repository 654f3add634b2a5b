"""Curator pages for campaigns: the list (/dashboard/), create, edit, entry links and invites,
and the payments CSV downloads. Every page is curator-only."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse

from annotation.crowd.campaign_option_fields import option_form_field
from annotation.crowd.campaign_options import CHOSEN_RUBRICS, KEPT_WHEN_ABSENT, OPTION_FIELDS
from annotation.crowd.services.campaign_questions import questions_without_levels
from annotation.crowd.services.campaigns import (
    CampaignInvalid,
    campaign_create,
    campaign_has_crowd_judgments,
    campaign_update,
    campaigns_with_counts,
)
from annotation.crowd.services.payments import (
    payments_full_csv,
    payments_prolific_bonus_csv,
    payments_rows,
    payments_total,
)
from annotation.crowd.services.workers import invite_create, invite_url_path
from annotation.figures import campaigns_csv, campaigns_with_figures
from annotation.models import Campaign
from annotation.questions import DEFAULT_QUESTIONS, OVERALL_ONLY_QUESTIONS, Rubric
from common.parsers import JSONInvalid, json_parse
from common.routes import curator_page
from datasets_app.models import CaptioningSystem, ImportBatch


def campaign_detail_url(slug: str) -> str:
    """The campaign's dashboard page (built by the quality pages); by path until it exists."""
    try:
        return reverse("annotation:campaign-detail", kwargs={"slug": slug})
    except NoReverseMatch:
        return f"/dashboard/campaigns/{slug}/"


# --- forms -------------------------------------------------------------------------------------

QUESTION_PRESETS = [
    ("paper", "Descriptiveness, relevance, fluency (the Rigel paper's three criteria, 1–5)"),
    ("overall", "One overall rating (1–5)"),
    ("custom", "Custom (JSON below)"),
]


class CampaignSettingsForm(forms.Form):
    """The settings this page offers, each field derived from its rule in
    `annotation.crowd.campaign_options`; the questions come as a preset or JSON."""

    name = option_form_field("name")
    description = option_form_field("description", widget=forms.Textarea(attrs={"rows": 3}))
    instructions = option_form_field("instructions", widget=forms.Textarea(attrs={"rows": 4}))
    status = option_form_field("status")
    question_preset = forms.ChoiceField(choices=QUESTION_PRESETS, initial="paper")
    rubric = option_form_field("rubric")
    questions_json = forms.CharField(
        required=False,
        label="Custom questions (JSON)",
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text='[{"key": "relevance", "label": "Relevance", "help": "..."}] — the rubric gives '
        'the levels; with the custom rubric add "levels": [{"value": 1, "label": "Bad", '
        '"description": "..."}, ...] to each question.',
    )
    judgments_per_candidate = option_form_field("judgments_per_candidate")
    allocation = option_form_field("allocation")
    reference_free = option_form_field("reference_free")
    lease_seconds = option_form_field("lease_seconds")
    min_seconds_on_clip = option_form_field("min_seconds_on_clip")
    reason_required_at_or_below = option_form_field("reason_required_at_or_below")
    max_assignments_per_worker = option_form_field("max_assignments_per_worker")
    retest_share = option_form_field("retest_share")
    retest_min_gap = option_form_field("retest_min_gap")
    metric = option_form_field("metric")
    pay_per_assignment = option_form_field("pay_per_assignment")
    currency = option_form_field("currency")
    completion_code = option_form_field("completion_code")
    redirect_url = option_form_field("redirect_url")
    screen_out_code = option_form_field("screen_out_code")
    screen_out_redirect_url = option_form_field("screen_out_redirect_url")
    erasure_mode = option_form_field("erasure_mode")

    def clean_currency(self) -> str:
        return self.cleaned_data["currency"].upper()

    def questions(self) -> list[dict[str, Any]]:
        preset = self.cleaned_data["question_preset"]
        if preset == "overall":
            return [dict(question) for question in OVERALL_ONLY_QUESTIONS]
        if preset == "custom":
            return self.cleaned_data["questions_parsed"]
        return [dict(question) for question in DEFAULT_QUESTIONS]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("question_preset") == "custom":
            try:
                cleaned["questions_parsed"] = json_parse(cleaned.get("questions_json") or "")
            except JSONInvalid as invalid:
                self.add_error("questions_json", f"Not valid JSON: {invalid}")
        return cleaned

    def options(self) -> dict[str, Any]:
        options = {name: self.cleaned_data[name] for name in _FORM_OPTION_FIELDS}
        for name in KEPT_WHEN_ABSENT:
            if options.get(name) in (None, ""):
                options.pop(name, None)
        return options


# The campaign settings (`OPTION_FIELDS`) this page offers; the others (controls, QC rules, review
# threshold, overall question) are set through the API or the admin.
_FORM_OPTION_FIELDS = tuple(
    name for name in OPTION_FIELDS if name in CampaignSettingsForm.base_fields
)


class CampaignCreateForm(CampaignSettingsForm):
    slug = option_form_field("slug")
    import_batches = forms.ModelMultipleChoiceField(
        queryset=ImportBatch.objects.all(), required=False, help_text="Empty: any."
    )
    systems = forms.MultipleChoiceField(
        choices=[], required=False, help_text="Captioning systems (empty: any)."
    )
    clip_list = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="VATEX clip ids, one per line (empty: any).",
    )
    clip_limit = forms.IntegerField(
        min_value=1, required=False, help_text="At most this many clips (ready ones first)."
    )

    field_order = ["slug", "name"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(set(CaptioningSystem.objects.values_list("name", flat=True)))
        systems = self.fields["systems"]
        assert isinstance(systems, forms.MultipleChoiceField)
        systems.choices = [(name, name) for name in names]


def _apply_errors(form: forms.Form, invalid: CampaignInvalid) -> None:
    for field, messages in invalid.errors.items():
        target = field if field in form.fields else None
        if field.startswith("questions"):
            target = "questions_json"
        elif field == "clips":
            target = "clip_list" if "clip_list" in form.fields else None
        for message in messages:
            form.add_error(target, f"{field}: {message}" if target is None else message)


# --- pages -------------------------------------------------------------------------------------


@curator_page("", name="campaign-list")
def campaign_list(request: HttpRequest) -> HttpResponse:
    campaigns = campaigns_with_figures(campaigns_with_counts().order_by("-created_at"))
    for campaign in campaigns:
        campaign.detail_url = campaign_detail_url(campaign.slug)  # type: ignore[attr-defined]
    return render(request, "annotation/campaigns/list.html", {"campaigns": campaigns})


@curator_page("campaigns.csv", name="campaign-list-csv")
def campaign_list_csv(request: HttpRequest) -> HttpResponse:
    """The campaign list's figures as CSV (the same selector as the page and the API)."""
    body = campaigns_csv(campaigns_with_counts().order_by("-created_at"))
    response = HttpResponse(body, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="campaigns.csv"'
    response["Cache-Control"] = "no-store"
    return response


@curator_page("campaigns/new/", name="campaign-create", methods=("GET", "POST"))
def campaign_new(request: HttpRequest) -> HttpResponse:
    form = CampaignCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        clip_list = [line.strip() for line in data["clip_list"].splitlines() if line.strip()]
        try:
            campaign = campaign_create(
                slug=data["slug"],
                name=data["name"],
                questions=form.questions(),
                judgments_per_candidate=data["judgments_per_candidate"],
                reference_free=data["reference_free"],
                import_batch_ids=[batch.pk for batch in data["import_batches"]],
                system_names=data["systems"],
                clip_vatex_ids=clip_list or None,
                clip_limit=data["clip_limit"],
                created_by=request.user,
                **form.options(),
            )
        except CampaignInvalid as invalid:
            _apply_errors(form, invalid)
        else:
            return redirect("annotation:campaign-links", slug=campaign.slug)
    return render(
        request,
        "annotation/campaigns/form.html",
        {"form": form, "title": "New campaign", "creating": True},
    )


@curator_page("campaigns/<slug:slug>/edit/", name="campaign-edit", methods=("GET", "POST"))
def campaign_edit(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = get_object_or_404(Campaign, slug=slug)
    rated = campaign_has_crowd_judgments(campaign=campaign)
    initial = {
        name: getattr(campaign, name)
        for name in (
            "name",
            "judgments_per_candidate",
            "reference_free",
            *_FORM_OPTION_FIELDS,
        )
    }
    initial["question_preset"] = "custom"
    # Under a rubric that gives the levels, the curator edits the questions alone.
    shown = campaign.questions
    if campaign.rubric != Rubric.CUSTOM:
        shown = questions_without_levels(shown)
    initial["questions_json"] = json.dumps(shown, indent=2, ensure_ascii=False)
    initial["rubric"] = campaign.rubric
    form = CampaignSettingsForm(request.POST or None, initial=initial)
    if campaign.rubric not in CHOSEN_RUBRICS:  # an imported campaign: not a curator's choice
        rubric_field = form.fields["rubric"]
        assert isinstance(rubric_field, forms.ChoiceField)
        rubric_field.choices = Rubric.choices
        rubric_field.disabled = True
    if rated:
        for name in ("question_preset", "rubric", "questions_json", "reference_free", "allocation"):
            form.fields[name].disabled = True
            form.fields[name].help_text = "Fixed: workers have submitted judgments already."
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        changes: dict[str, Any] = {
            "name": data["name"],
            "judgments_per_candidate": data["judgments_per_candidate"],
            **form.options(),
        }
        if not rated:
            changes["questions"] = form.questions()
            changes["reference_free"] = data["reference_free"]
        try:
            campaign_update(campaign=campaign, **changes)
        except CampaignInvalid as invalid:
            _apply_errors(form, invalid)
        else:
            return redirect("annotation:campaign-list")
    return render(
        request,
        "annotation/campaigns/form.html",
        {"form": form, "title": f"Edit {campaign.name}", "campaign": campaign, "creating": False},
    )


class InviteForm(forms.Form):
    invitee = forms.CharField(max_length=200, help_text="An id for the person (e.g. an e-mail).")
    valid_days = forms.IntegerField(min_value=1, max_value=365, initial=14)


@curator_page("campaigns/<slug:slug>/links/", name="campaign-links", methods=("GET", "POST"))
def campaign_links(request: HttpRequest, slug: str) -> HttpResponse:
    """Entry links for Prolific and MTurk, invite links, and the payments export."""
    campaign = get_object_or_404(Campaign, slug=slug, is_imported=False)
    base = request.build_absolute_uri(f"/w/{campaign.slug}/")
    invite = None
    form = InviteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        token, expires_at = invite_create(
            campaign=campaign,
            invitee=form.cleaned_data["invitee"].strip(),
            valid_for=timedelta(days=form.cleaned_data["valid_days"]),
        )
        invite = {
            "invitee": form.cleaned_data["invitee"].strip(),
            "url": request.build_absolute_uri(invite_url_path(campaign=campaign, token=token)),
            "expires_at": expires_at,
        }
        form = InviteForm()
    context = {
        "campaign": campaign,
        "detail_url": campaign_detail_url(campaign.slug),
        "prolific_url": f"{base}?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}"
        "&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}",
        "mturk_url": base,
        "invite": invite,
        "form": form,
        "payments": payments_rows(campaign=campaign),
        "payments_total": payments_total(campaign=campaign),
    }
    return render(request, "annotation/campaigns/links.html", context)


@curator_page("campaigns/<slug:slug>/payments.csv", name="campaign-payments-csv")
def campaign_payments_csv(request: HttpRequest, slug: str) -> HttpResponse:
    """`?format=prolific` (default): Prolific bulk bonus lines; `?format=full`: every column."""
    campaign = get_object_or_404(Campaign, slug=slug)
    kind = request.GET.get("format", "prolific")
    if kind == "full":
        body = payments_full_csv(campaign=campaign)
        name = f"{campaign.slug}-payments.csv"
    elif kind == "prolific":
        body, _skipped = payments_prolific_bonus_csv(campaign=campaign)
        name = f"{campaign.slug}-prolific-bonus.csv"
    else:
        return HttpResponse(
            "format must be prolific or full", status=400, content_type="text/plain"
        )
    response = HttpResponse(body, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response
