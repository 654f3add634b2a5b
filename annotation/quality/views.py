"""Curator pages of quality control: the campaign page (progress, agreement, histograms, QC runs),
the worker table with exclude/include, the review queue and review items, the audit log and the
per-system leaderboard. Curators only: anonymous visitors are sent to the login page, anyone else
gets 403. Every change is a CSRF-protected POST that calls one service and redirects."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import cast

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from annotation import charts
from annotation.figures import campaign_metric_agreement
from annotation.models import AuditEntry, Campaign, Participation, ReviewItem, ReviewStatus
from annotation.quality.audit_text import audit_sentences
from annotation.quality.campaign_charts import agreement_rows, histogram_rows
from annotation.quality.consistency import campaign_retest
from annotation.quality.exclusions import worker_exclude, worker_include
from annotation.quality.review import (
    UNDOABLE,
    JudgmentExclusionRequest,
    ReviewError,
    audit_undo,
    review_claim,
    review_claim_next,
    review_release,
    review_resolve,
)
from annotation.quality.rules import RULE_LABELS
from annotation.quality.run import qc_run_start
from annotation.quality.selectors import (
    WORKER_SORTS,
    audit_entries,
    campaign_progress,
    campaign_rules,
    qc_runs_recent,
    review_counts,
    review_item_detail,
    review_next_open,
    review_queue,
    statistic_explanations,
    system_leaderboard,
    worker_rows,
)
from common import storage
from common.routes import curator_page


def _campaign(slug: str) -> Campaign:
    return get_object_or_404(Campaign, slug=slug)


@curator_page("campaigns/<slug:slug>/", name="campaign-detail")
def campaign_detail(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = _campaign(slug)
    progress = campaign_progress(campaign=campaign)
    per_day = progress["judgments_per_day"]
    labels = {
        question["key"]: question.get("label", question["key"]) for question in campaign.questions
    }
    # Built before the per-day chart, as they always were: chart ids are numbered in order.
    agreement = agreement_rows(campaign, labels)
    histograms = histogram_rows(campaign, labels)
    context = {
        "campaign": campaign,
        "progress": progress,
        "per_day_empty": not any(row["judgments"] for row in per_day),
        "per_day_chart": charts.bar_chart(
            [(row["day"][5:], row["judgments"]) for row in per_day],
            title="Judgments per day, last 30 days",
            width=620,
            label_every=5,
        ),
        "agreement_rows": agreement,
        "metric_agreement": campaign_metric_agreement(campaign=campaign),
        "histogram_rows": histograms,
        "runs": qc_runs_recent(campaign=campaign),
        "retest": campaign_retest(campaign=campaign),
        "review": review_counts(campaign=campaign),
        "rules": [
            {"key": key, "label": RULE_LABELS.get(key, key), "config": config}
            for key, config in campaign_rules(campaign=campaign).items()
        ],
    }
    return render(request, "annotation/dashboard/campaign_detail.html", context)


@curator_page("campaigns/<slug:slug>/qc-runs/", name="quality-run", methods=("POST",))
def qc_run_create(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = _campaign(slug)
    run = qc_run_start(campaign=campaign, requested_by=request.user)
    messages.success(request, f"QC run {run.pk} is {run.get_status_display().lower()}.")
    return redirect("annotation:campaign-detail", slug=campaign.slug)


# ----------------------------------------------------------------------------------------------
# Workers
# ----------------------------------------------------------------------------------------------


@curator_page("campaigns/<slug:slug>/workers/", name="quality-workers")
def workers(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = _campaign(slug)
    sort = request.GET.get("sort", "worker")
    if sort not in WORKER_SORTS:
        sort = "worker"
    descending = request.GET.get("order") == "desc"
    rows = worker_rows(campaign=campaign, sort=sort, descending=descending)
    columns = [
        ("worker", "Worker", None),
        ("status", "Status", None),
        ("judgments", "Judgments", "judgments"),
        ("median_seconds", "Median s / candidate", "median_seconds_per_candidate"),
        ("speed_vs_campaign", "× campaign", "speed_vs_campaign"),
        ("speed_vs_clip_length", "× clip length", "speed_vs_clip_length"),
        ("uniform_share", "Uniform share", "uniform_share"),
        ("rating_variance", "Variance", "rating_variance"),
        ("control_accuracy", "Controls", "control_accuracy"),
        ("agreement", "Agreement", "agreement"),
        ("severity", "Severity ± SE", "severity"),
        ("flags", "Flags", None),
    ]
    explanations = statistic_explanations()
    header = [
        {
            "key": key,
            "label": label,
            "explanation": explanations.get(explanation or "", ""),
            "active": key == sort,
            "descending": descending,
            "next_order": "desc" if key == sort and not descending else "asc",
        }
        for key, label, explanation in columns
    ]
    return render(
        request,
        "annotation/dashboard/workers.html",
        {
            "campaign": campaign,
            "rows": rows,
            "header": header,
            "explanations": [
                (label, explanations[explanation])
                for _key, label, explanation in columns
                if explanation
            ],
        },
    )


def _participation(campaign: Campaign, participation_id: int) -> Participation:
    return get_object_or_404(Participation, pk=participation_id, campaign=campaign)


@curator_page(
    "campaigns/<slug:slug>/workers/<int:participation_id>/exclude/",
    name="quality-worker-exclude",
    methods=("POST",),
)
def worker_exclude_view(request: HttpRequest, slug: str, participation_id: int) -> HttpResponse:
    campaign = _campaign(slug)
    participation = _participation(campaign, participation_id)
    reason = request.POST.get("reason", "").strip()[:2000]
    outcome = worker_exclude(participation=participation, actor=request.user, reason=reason)
    if outcome.exclusions:
        messages.success(
            request,
            f"{participation.worker.external_id} excluded; "
            f"{outcome.judgments_excluded} judgment(s) excluded and their slots reopened.",
        )
    else:
        messages.info(request, f"{participation.worker.external_id} was already excluded.")
    return redirect(reverse("annotation:quality-workers", kwargs={"slug": campaign.slug}))


@curator_page(
    "campaigns/<slug:slug>/workers/<int:participation_id>/include/",
    name="quality-worker-include",
    methods=("POST",),
)
def worker_include_view(request: HttpRequest, slug: str, participation_id: int) -> HttpResponse:
    campaign = _campaign(slug)
    participation = _participation(campaign, participation_id)
    outcome = worker_include(
        participation=participation, actor=request.user, note=request.POST.get("note", "")
    )
    text = f"{participation.worker.external_id} re-included; {outcome.judgments_included} judgment(s) back"
    if outcome.judgments_kept_out:
        text += (
            f", {outcome.judgments_kept_out} kept out because other workers refilled those slots"
        )
    messages.success(request, text + ".")
    return redirect(reverse("annotation:quality-workers", kwargs={"slug": campaign.slug}))


# ----------------------------------------------------------------------------------------------
# Review
# ----------------------------------------------------------------------------------------------


@curator_page("campaigns/<slug:slug>/review/", name="review-queue")
def review_queue_view(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = _campaign(slug)
    show_resolved = request.GET.get("show") == "resolved"
    statuses = (
        (ReviewStatus.RESOLVED,) if show_resolved else (ReviewStatus.OPEN, ReviewStatus.CLAIMED)
    )
    items = list(review_queue(campaign=campaign, statuses=statuses)[:500])
    return render(
        request,
        "annotation/dashboard/review_queue.html",
        {
            "campaign": campaign,
            "items": items,
            "counts": review_counts(campaign=campaign),
            "show_resolved": show_resolved,
        },
    )


@curator_page(
    "campaigns/<slug:slug>/review/claim-next/", name="review-claim-next", methods=("POST",)
)
def review_claim_next_view(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = _campaign(slug)
    item = review_claim_next(campaign=campaign, user=request.user)
    if item is None:
        messages.info(request, "Nothing left to review.")
        return redirect("annotation:review-queue", slug=campaign.slug)
    return redirect("annotation:review-item", slug=campaign.slug, item_id=item.pk)


def _review_item(campaign: Campaign, item_id: int) -> ReviewItem:
    return get_object_or_404(
        ReviewItem.objects.select_related(
            "campaign", "campaign_candidate__candidate__system", "campaign_candidate__clip"
        ),
        pk=item_id,
        campaign=campaign,
    )


@dataclass
class ResolveForm:
    """What the curator entered in the resolve form, kept to show it again after an error."""

    ratings: dict[str, str] = field(default_factory=dict)
    exclude: set[str] = field(default_factory=set)
    reasons: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    note: str = ""
    errors: dict[str, list[str]] = field(default_factory=dict)

    def error(self, message: str, *, on: str = "") -> None:
        self.errors.setdefault(on, []).append(message)


def _review_item_page(
    request: HttpRequest,
    campaign: Campaign,
    item: ReviewItem,
    form: ResolveForm | None = None,
    *,
    status: int = 200,
) -> HttpResponse:
    form = form or ResolveForm()
    detail = review_item_detail(item=item)
    clip = detail["clip"]
    try:
        video_url = storage.media_url(clip.video_key) if clip.video_key else None
        poster_url = storage.media_url(clip.poster_key) if clip.poster_key else None
        image_url = storage.media_url(clip.image_key) if clip.image_key else None
        media_unavailable = False
    except storage.StorageUnavailable:
        video_url = poster_url = image_url = None
        media_unavailable = True
    labels = {
        question["key"]: question.get("label", question["key"]) for question in campaign.questions
    }
    means = detail["candidate_item"].means or {}
    resolution = (detail["candidate_item"].resolution or {}).get("values", {})
    questions = [
        {
            "key": key,
            "label": labels[key],
            "mean": means.get(key),
            "resolution": resolution.get(key),
            "ratings": [judgment["values"].get(key) for judgment in detail["judgments"]],
            "chosen": form.ratings.get(key, ""),
            "errors": form.errors.get(f"rating_{key}", []),
            "is_overall": key == campaign.overall_question_key,
        }
        for key in campaign.question_keys
    ]
    for judgment in detail["judgments"]:
        # The page adds the form's state to each judgment row (the template reads them there).
        row = cast(MutableMapping[str, object], judgment)
        row["ratings"] = [judgment["values"].get(key) for key in campaign.question_keys]
        row["exclude_checked"] = str(judgment["id"]) in form.exclude
        row["reason_value"] = form.reasons.get(str(judgment["id"]), "")
        row["reason_errors"] = form.errors.get(f"reason_{judgment['id']}", [])
    overall_question = next((question for question in questions if question["is_overall"]), None)
    return render(
        request,
        "annotation/dashboard/review_item.html",
        {
            "campaign": campaign,
            "detail": detail,
            "item": item,
            "questions": questions,
            # The scores table shows the overall question once, as its "Overall" row.
            "score_rows": [question for question in questions if not question["is_overall"]],
            "overall_question": overall_question,
            "levels": ["1", "2", "3", "4", "5"],
            "form": form,
            "form_errors": form.errors.get("", []),
            "video_url": video_url,
            "image_url": image_url,
            "media_unavailable": media_unavailable,
            "poster_url": poster_url,
            "held_by_me": item.status == ReviewStatus.CLAIMED
            and item.claimed_by_id == request.user.pk,
            "held_by_other": item.status == ReviewStatus.CLAIMED
            and item.claimed_by_id != request.user.pk,
            "undoable": sorted(UNDOABLE),
            "audit_sentences": audit_sentences(detail["audit"]),
        },
        status=status,
    )


@curator_page("campaigns/<slug:slug>/review/<int:item_id>/", name="review-item")
def review_item_view(request: HttpRequest, slug: str, item_id: int) -> HttpResponse:
    campaign = _campaign(slug)
    return _review_item_page(request, campaign, _review_item(campaign, item_id))


@curator_page(
    "campaigns/<slug:slug>/review/<int:item_id>/claim/", name="review-claim", methods=("POST",)
)
def review_claim_view(request: HttpRequest, slug: str, item_id: int) -> HttpResponse:
    campaign = _campaign(slug)
    item = _review_item(campaign, item_id)
    if not review_claim(item=item, user=request.user):
        messages.error(request, "Someone else is reviewing this item.")
    return redirect("annotation:review-item", slug=campaign.slug, item_id=item.pk)


@curator_page(
    "campaigns/<slug:slug>/review/<int:item_id>/release/", name="review-release", methods=("POST",)
)
def review_release_view(request: HttpRequest, slug: str, item_id: int) -> HttpResponse:
    campaign = _campaign(slug)
    item = _review_item(campaign, item_id)
    if review_release(item=item, user=request.user):
        messages.info(request, "Item returned to the queue.")
    return redirect("annotation:review-queue", slug=campaign.slug)


@curator_page(
    "campaigns/<slug:slug>/review/<int:item_id>/resolve/", name="review-resolve", methods=("POST",)
)
def review_resolve_view(request: HttpRequest, slug: str, item_id: int) -> HttpResponse:
    """Resolve; on an error the page comes back (400) with every input as it was and the message
    beside the field at fault. "Resolve and next" (`then=next`) opens the next open item."""
    campaign = _campaign(slug)
    item = _review_item(campaign, item_id)
    form = ResolveForm(
        drop=request.POST.get("drop") == "on", note=request.POST.get("note", "")[:2000]
    )
    ratings: dict[str, float] = {}
    for key in campaign.question_keys:
        raw = request.POST.get(f"rating_{key}", "").strip()[:20]
        if not raw:
            continue
        form.ratings[key] = raw
        try:
            ratings[key] = float(raw)
        except ValueError:
            form.error("not a number", on=f"rating_{key}")
    exclude = []
    for raw_id in request.POST.getlist("exclude")[:1000]:
        if not raw_id.isdigit():
            continue
        reason = request.POST.get(f"reason_{raw_id}", "").strip()[:2000]
        form.exclude.add(raw_id)
        exclude.append(JudgmentExclusionRequest(judgment_id=int(raw_id), reason=reason))
    for name in list(request.POST)[:1000]:
        judgment_id = name.removeprefix("reason_")
        if name.startswith("reason_") and judgment_id.isdigit():
            form.reasons[judgment_id] = request.POST.get(name, "")[:2000]
    if not form.errors:
        try:
            review_resolve(
                item=item,
                user=request.user,
                ratings=ratings,
                exclude=exclude,
                drop=form.drop,
                note=form.note,
            )
        except ReviewError as error:
            form.error(str(error), on=error.field)
    if form.errors:
        return _review_item_page(request, campaign, item, form, status=400)
    if request.POST.get("then") == "next":
        following = review_next_open(campaign=campaign)
        if following is None:
            messages.success(request, f"Item {item.pk} resolved. Nothing left to review.")
            return redirect("annotation:review-queue", slug=campaign.slug)
        messages.success(request, f"Item {item.pk} resolved; this is the next one.")
        return redirect("annotation:review-item", slug=campaign.slug, item_id=following.pk)
    messages.success(request, "Resolved.")
    return redirect("annotation:review-item", slug=campaign.slug, item_id=item.pk)


@curator_page(
    "campaigns/<slug:slug>/audit/<int:entry_id>/undo/", name="audit-undo", methods=("POST",)
)
def audit_undo_view(request: HttpRequest, slug: str, entry_id: int) -> HttpResponse:
    campaign = _campaign(slug)
    entry = get_object_or_404(AuditEntry, pk=entry_id, campaign=campaign)
    try:
        audit_undo(entry=entry, user=request.user, note=request.POST.get("note", ""))
        messages.success(request, f"Undone: {entry.get_action_display()}.")
    except ReviewError as error:
        messages.error(request, str(error))
    target = request.POST.get("next", "")
    if target.startswith("/dashboard/"):
        return redirect(target)
    if entry.review_item_id:
        return redirect("annotation:review-item", slug=campaign.slug, item_id=entry.review_item_id)
    return redirect("annotation:audit-log", slug=campaign.slug)


@curator_page("campaigns/<slug:slug>/audit/", name="audit-log")
def audit_log(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = _campaign(slug)
    entries = audit_sentences(audit_entries(campaign=campaign))
    undone = set(
        AuditEntry.objects.filter(undoes__in=[entry.pk for entry in entries]).values_list(
            "undoes_id", flat=True
        )
    )
    return render(
        request,
        "annotation/dashboard/audit.html",
        {"campaign": campaign, "entries": entries, "undone": undone, "undoable": sorted(UNDOABLE)},
    )


# ----------------------------------------------------------------------------------------------
# Leaderboard
# ----------------------------------------------------------------------------------------------


@curator_page("campaigns/<slug:slug>/leaderboard/", name="leaderboard")
def leaderboard(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = _campaign(slug)
    keys = campaign.question_keys
    sort = request.GET.get("sort", "overall")
    if sort not in {"overall", "system", "candidates", *keys}:
        sort = "overall"
    descending = request.GET.get("order", "desc" if sort != "system" else "asc") == "desc"
    board = system_leaderboard(campaign=campaign, sort=sort, descending=descending)
    labels = {
        question["key"]: question.get("label", question["key"]) for question in campaign.questions
    }
    chart_key = sort if sort in keys else "overall"
    chart = charts.horizontal_bars(
        [
            (
                row["system"],
                row["overall"] if chart_key == "overall" else row["questions"][chart_key],
            )
            for row in board[:30]
        ],
        title=f"Mean human score per system: {labels.get(chart_key, 'overall')}",
    )
    # The overall question (when the campaign has one) is the Overall column: shown once.
    columns = [key for key in keys if key != campaign.overall_question_key]
    for row in board:
        row["question_values"] = [row["questions"][key] for key in columns]
    return render(
        request,
        "annotation/dashboard/leaderboard.html",
        {
            "campaign": campaign,
            "board": board,
            "questions": [(key, labels[key]) for key in columns],
            "overall_label": labels.get(campaign.overall_question_key, "Overall"),
            "sort": sort,
            "descending": descending,
            "chart": chart,
        },
    )
