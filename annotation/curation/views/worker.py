"""The curator's page of one worker in a campaign (/dashboard/campaigns/<slug>/workers/<id>/):
QC statistics with their explanations, flags and the standing exclusion, and the worker's
severity per question from the latest calibration with its 95% interval; and, as the data
browser's worker page, the worker's judgments (keyset pages linking to each candidate), every
exclusion and its reversal, and the worker's other campaigns."""

from __future__ import annotations

from typing import Any, TypedDict

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from annotation.curation.browse.forms import JudgmentTableForm
from annotation.curation.browse.links import Links
from annotation.curation.browse.pagination import DEFAULT_PAGE_SIZE, CursorInvalid, Page
from annotation.curation.browse.selectors import judgments_page, worker_history
from annotation.models import Campaign, Participation, WorkerExclusion, WorkerQCStats
from annotation.quality.calibration_job import (
    SEVERITY_EXPLANATION,
    calibration_latest,
    worker_severities,
)
from annotation.quality.consistency import retest_min_pairs, worker_retest
from annotation.quality.selectors import statistic_explanations
from common.routes import curator_page

# The interval drawing spans -AXIS..+AXIS logits; values beyond are drawn at the edge.
AXIS = 3.0


def _percent(value: float) -> float:
    return round(100.0 * (max(-AXIS, min(AXIS, value)) + AXIS) / (2 * AXIS), 2)


# The statistics shown, in order, with their labels.
STATISTIC_LABELS: tuple[tuple[str, str], ...] = (
    ("judgments", "Judgments"),
    ("median_seconds_per_candidate", "Median seconds per candidate"),
    ("speed_vs_campaign", "× campaign"),
    ("speed_vs_clip_length", "× clip length"),
    ("uniform_share", "Uniform share"),
    ("rating_variance", "Rating variance"),
    ("control_accuracy", "Control accuracy"),
    ("agreement", "Agreement"),
)


class StatisticRow(TypedDict):
    label: str
    value: float | int | None
    help: str


@curator_page("campaigns/<slug:slug>/workers/<int:participation_id>/", name="quality-worker")
def worker_detail(request: HttpRequest, slug: str, participation_id: int) -> HttpResponse:
    campaign = get_object_or_404(Campaign, slug=slug)
    participation = get_object_or_404(
        Participation.objects.select_related("worker"), pk=participation_id, campaign=campaign
    )
    stats = getattr(participation, "qc_stats", None)
    exclusion = (
        WorkerExclusion.objects.filter(participation=participation, reversed_at__isnull=True)
        .order_by("-created_at")
        .first()
    )
    judgments = _judgments(participation, after=request.GET.get("after", "")[:600])
    Links().judgments(judgments.rows)
    return render(
        request,
        "annotation/dashboard/worker_detail.html",
        {
            "judgments": judgments,
            **worker_history(participation=participation),
            "campaign": campaign,
            "participation": participation,
            "stats": stats,
            "statistics": _statistic_rows(stats),
            "flags": stats.flags if stats else [],
            "exclusion": exclusion,
            "severities": _severity_rows(campaign, participation),
            "severity_help": SEVERITY_EXPLANATION,
            "calibration": calibration_latest(campaign=campaign),
            "axis": AXIS,
            "worker_retest": worker_retest(campaign=campaign, participation_id=participation.pk),
            "worker_retest_min_pairs": retest_min_pairs(campaign=campaign),
        },
    )


def _statistic_rows(stats: WorkerQCStats | None) -> list[StatisticRow]:
    if stats is None:
        return []
    explanations = statistic_explanations()
    return [
        {"label": label, "value": getattr(stats, key), "help": explanations.get(key, "")}
        for key, label in STATISTIC_LABELS
    ]


def _severity_rows(campaign: Campaign, participation: Participation) -> list[dict[str, Any]]:
    """The worker's severity per question with the drawing of its 95% interval."""
    labels = {
        question["key"]: question.get("label", question["key"]) for question in campaign.questions
    }
    severities = []
    for key, entry in (
        worker_severities(campaign=campaign, participation_ids=[participation.pk])
        .get(participation.pk, {})
        .items()
    ):
        low, high = _percent(entry["low"]), _percent(entry["high"])
        severities.append(
            {
                "key": key,
                "label": labels.get(key, key),
                **entry,
                "bar_left": low,
                "bar_width": max(round(high - low, 2), 0.5),
                "mark": _percent(entry["severity"]),
            }
        )
    return severities


def _judgments(participation: Participation, *, after: str) -> Page:
    """A page of the worker's judgments, newest first."""

    def judgments_from(after: str) -> Page:
        return judgments_page(
            filters={"participation": participation},
            sort=JudgmentTableForm.SORTS[0],
            descending=True,
            after=after,
            size=DEFAULT_PAGE_SIZE,
        )

    try:
        return judgments_from(after)
    except CursorInvalid:
        return judgments_from("")  # a mangled link: the newest judgments instead
