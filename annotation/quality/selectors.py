"""Reads for the quality pages and API: progress, histograms, agreement history, the worker table,
the review queue, review items and the per-system leaderboard. Set-based queries only; nothing
here writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypedDict, cast

from django.db import connection
from django.db.models import Avg, Count, FloatField, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, TruncDate
from django.utils import timezone

from annotation.crowd.services.columns import json_number
from annotation.figures import CampaignFigures, campaign_completion_estimate, campaign_figures
from annotation.models import (
    AgreementSnapshot,
    AuditEntry,
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    QCRun,
    ReviewItem,
    ReviewStatus,
    WorkerExclusion,
    WorkerQCStats,
)
from annotation.quality.calibration_job import (
    SEVERITY_EXPLANATION,
    severity_mean,
    worker_severities,
)
from annotation.quality.rules import FlagJson, qc_rules_merge
from annotation.quality.statistics import STATISTIC_EXPLANATIONS
from datasets_app.models import CandidateCaption, Clip, ReferenceCaption

# ----------------------------------------------------------------------------------------------
# Progress
# ----------------------------------------------------------------------------------------------


class DayCount(TypedDict):
    day: str  # ISO date
    judgments: int


class CampaignProgress(TypedDict):
    figures: CampaignFigures
    judgments_per_day: list[DayCount]
    recent_judgments_per_day: float
    estimated_completion: str | None
    latest_completion: str | None
    no_estimate_reason: str


def campaign_progress(*, campaign: Campaign, days: int = 30) -> CampaignProgress:
    """The campaign's figures (`annotation.figures`: candidates, slots, judgments, completeness),
    judgments per day over the last `days` days, and the completion estimate or why there is
    none."""
    figures = campaign_figures(campaign=campaign)
    estimate = campaign_completion_estimate(campaign=campaign, figures=figures)
    today = timezone.now().date()
    since = today - timedelta(days=days - 1)
    per_day_rows = dict(
        # The judgments the `judgments` figure counts: control items left out.
        Judgment.objects.filter(
            campaign=campaign, created_at__date__gte=since, campaign_candidate__is_control=False
        )
        .annotate(day=TruncDate("created_at"))
        .values_list("day")
        .annotate(count=Count("id"))
        .values_list("day", "count")
    )
    per_day: list[DayCount] = [
        {
            "day": (since + timedelta(days=offset)).isoformat(),
            "judgments": per_day_rows.get(since + timedelta(days=offset), 0),
        }
        for offset in range(days)
    ]
    return {
        "figures": figures,
        "judgments_per_day": per_day,
        "recent_judgments_per_day": estimate.judgments_per_day,
        "estimated_completion": estimate.estimated.isoformat() if estimate.estimated else None,
        "latest_completion": estimate.latest.isoformat() if estimate.latest else None,
        "no_estimate_reason": estimate.reason,
    }


def campaign_histograms(*, campaign: Campaign) -> dict[str, dict[str, list[int]]]:
    """Counts of each rating 1..5 per question, over every judgment and over kept ones (control
    items left out). One grouped query per question."""
    result: dict[str, dict[str, list[int]]] = {}
    judgment_table = Judgment._meta.db_table
    candidate_table = CampaignCandidate._meta.db_table
    for key in campaign.question_keys:
        value = json_number('j."values"', key)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT ROUND({value}) AS v, j.is_excluded, COUNT(*) "
                f"FROM {judgment_table} j JOIN {candidate_table} cc "
                f"ON cc.id = j.campaign_candidate_id "
                f"WHERE j.campaign_id = %s AND cc.is_control = FALSE "
                f"GROUP BY ROUND({value}), j.is_excluded",
                [campaign.pk],
            )
            every, kept = [0] * 5, [0] * 5
            for rating, excluded, count in cursor.fetchall():
                if rating is None or not 1 <= int(rating) <= 5:
                    continue
                every[int(rating) - 1] += count
                if not excluded:
                    kept[int(rating) - 1] += count
        result[key] = {"all": every, "kept": kept}
    return result


class AlphaPoint(TypedDict):
    computed_at: str  # ISO time
    alpha_all: float | None
    alpha_kept: float | None
    items: int
    judgments: int


def agreement_history(*, campaign: Campaign, limit: int = 200) -> dict[str, list[AlphaPoint]]:
    """Stored alpha per question over time (oldest first), for the history chart."""
    history: dict[str, list[AlphaPoint]] = {key: [] for key in campaign.question_keys}
    rows = (
        AgreementSnapshot.objects.filter(campaign=campaign)
        .order_by("-computed_at")
        .values("question_key", "alpha_all", "alpha_kept", "items", "judgments", "computed_at")[
            : limit * max(1, len(history))
        ]
    )
    for row in reversed(list(rows)):
        history.setdefault(row["question_key"], []).append(
            {
                "computed_at": row["computed_at"].isoformat(),
                "alpha_all": row["alpha_all"],
                "alpha_kept": row["alpha_kept"],
                "items": row["items"],
                "judgments": row["judgments"],
            }
        )
    return history


def qc_runs_recent(*, campaign: Campaign, limit: int = 10) -> QuerySet[QCRun]:
    return QCRun.objects.filter(campaign=campaign).select_related("requested_by")[:limit]


# ----------------------------------------------------------------------------------------------
# Workers
# ----------------------------------------------------------------------------------------------

# Sort name (query parameter) -> row key.
WORKER_SORTS: dict[str, str] = {
    "worker": "worker",
    "status": "status",
    "judgments": "judgments",
    "median_seconds": "median_seconds",
    "speed_vs_campaign": "speed_vs_campaign",
    "speed_vs_clip_length": "speed_vs_clip_length",
    "uniform_share": "uniform_share",
    "rating_variance": "rating_variance",
    "control_accuracy": "control_accuracy",
    "agreement": "agreement",
    "severity": "severity_value",
    "flags": "flag_count",
}


def rows_sorted(rows: list[dict[str, Any]], key: str, *, descending: bool) -> list[dict[str, Any]]:
    """Sort by `key`; rows without a value always come last."""
    present = [row for row in rows if row.get(key) is not None]
    missing = [row for row in rows if row.get(key) is None]
    present.sort(key=lambda row: row[key], reverse=descending)
    return present + missing


def worker_rows(
    *, campaign: Campaign, sort: str = "worker", descending: bool = False, limit: int = 2000
) -> list[dict[str, Any]]:
    """One row per participation with its QC statistics, flags and standing exclusion."""
    order = WORKER_SORTS.get(sort, "worker")
    participations = (
        Participation.objects.filter(campaign=campaign)
        .select_related("worker", "qc_stats")
        .annotate(judgment_count=Count("judgments"))
    )
    rows = []
    for participation in participations:
        stats: WorkerQCStats | None = getattr(participation, "qc_stats", None)
        rows.append(
            {
                "participation": participation.pk,
                "worker": participation.worker.external_id,
                "platform": participation.worker.platform,
                "imported": participation.worker.is_imported,
                "status": participation.status,
                "judgments": stats.judgments if stats else participation.judgment_count,
                "median_seconds": stats.median_seconds_per_candidate if stats else None,
                "speed_vs_campaign": stats.speed_vs_campaign if stats else None,
                "speed_vs_clip_length": stats.speed_vs_clip_length if stats else None,
                "uniform_share": stats.uniform_share if stats else None,
                "rating_variance": stats.rating_variance if stats else None,
                "control_items": stats.control_items if stats else 0,
                "control_accuracy": stats.control_accuracy if stats else None,
                "agreement": stats.agreement if stats else None,
                "flags": stats.flags if stats else [],
                "computed_at": stats.computed_at.isoformat() if stats else None,
            }
        )
    standing = {}
    for exclusion in WorkerExclusion.objects.filter(
        participation__campaign=campaign, reversed_at__isnull=True
    ).order_by("created_at"):
        standing[exclusion.participation_id] = {
            "id": exclusion.pk,
            "rules": exclusion.rules,
            "judgments_excluded": exclusion.judgments_excluded,
            "created_at": exclusion.created_at.isoformat(),
            "by_curator": exclusion.created_by_id is not None,
        }
    severities = worker_severities(campaign=campaign)
    for row in rows:
        row["exclusion"] = standing.get(row["participation"])
        row["flag_count"] = len(row["flags"])
        row["severities"] = severities.get(row["participation"], {})
        row["severity"] = severity_mean(row["severities"])
        row["severity_value"] = row["severity"]["severity"] if row["severity"] else None
    return rows_sorted(rows, order, descending=descending)[:limit]


def statistic_explanations() -> dict[str, str]:
    return {**STATISTIC_EXPLANATIONS, "severity": SEVERITY_EXPLANATION}


def campaign_rules(*, campaign: Campaign) -> dict[str, dict[str, Any]]:
    return qc_rules_merge(campaign.qc_rules)


# ----------------------------------------------------------------------------------------------
# Review
# ----------------------------------------------------------------------------------------------


def review_queue(
    *, campaign: Campaign, statuses: tuple[str, ...] = (ReviewStatus.OPEN, ReviewStatus.CLAIMED)
) -> QuerySet[ReviewItem]:
    return (
        ReviewItem.objects.filter(campaign=campaign, status__in=statuses)
        .select_related(
            "campaign_candidate__candidate__system",
            "campaign_candidate__clip",
            "claimed_by",
            "resolved_by",
        )
        .order_by("-priority", "id")
    )


def review_next_open(*, campaign: Campaign) -> ReviewItem | None:
    """The open item a reviewer should look at next: the widest disagreement first (the queue's
    order); None when nothing is open."""
    return (
        ReviewItem.objects.filter(campaign=campaign, status=ReviewStatus.OPEN)
        .order_by("-priority", "id")
        .first()
    )


def review_counts(*, campaign: Campaign) -> dict[str, int]:
    counts = dict(
        ReviewItem.objects.filter(campaign=campaign)
        .values_list("status")
        .annotate(count=Count("id"))
        .values_list("status", "count")
    )
    return {status: counts.get(status, 0) for status in ReviewStatus.values}


class WaitingItem(TypedDict):
    candidate: int  # CampaignCandidate id
    range: int


class ReviewQueueSummary(TypedDict):
    open: int
    resolved: int
    items: list[WaitingItem]


def review_queue_summary(*, campaign: Campaign, limit: int | None = None) -> ReviewQueueSummary:
    """What `manage.py review_queue --json` prints: items waiting (open or claimed) and resolved,
    and the waiting items worst first ({"candidate": CampaignCandidate id, "range": r}), at most
    `limit` of them."""
    waiting_statuses = (ReviewStatus.OPEN, ReviewStatus.CLAIMED)
    waiting = ReviewItem.objects.filter(campaign=campaign, status__in=waiting_statuses).order_by(
        "-priority", "id"
    )
    if limit is not None:
        waiting = waiting[: max(limit, 0)]
    return {
        "open": ReviewItem.objects.filter(campaign=campaign, status__in=waiting_statuses).count(),
        "resolved": ReviewItem.objects.filter(
            campaign=campaign, status=ReviewStatus.RESOLVED
        ).count(),
        "items": [
            {"candidate": candidate, "range": rating_range}
            for candidate, rating_range in waiting.values_list(
                "campaign_candidate_id", "rating_range"
            )
        ],
    }


class JudgmentWorkerStats(TypedDict):
    judgments: int
    median_seconds_per_candidate: float | None
    speed_vs_campaign: float | None
    uniform_share: float | None
    rating_variance: float | None
    control_accuracy: float | None
    agreement: float | None
    flags: list[FlagJson]  # as stored


class ReviewJudgment(TypedDict):
    id: int
    worker: str
    participation: int
    worker_status: str
    source: str
    values: dict[str, float]
    reason: str
    server_seconds: float | None
    is_excluded: bool
    excluded_by: str
    exclusion_reason: str
    worker_stats: JudgmentWorkerStats | None


class ReviewItemDetail(TypedDict):
    item: ReviewItem
    candidate_item: CampaignCandidate
    candidate: CandidateCaption
    clip: Clip
    references: list[str]
    judgments: list[ReviewJudgment]
    judgments_kept: int
    audit: list[AuditEntry]


def review_item_detail(*, item: ReviewItem) -> ReviewItemDetail:
    """Everything an expert needs to decide: clip, references, candidate, each judgment with its
    worker's QC statistics, and the decisions taken so far."""
    candidate_item = item.campaign_candidate
    candidate = candidate_item.candidate
    clip = candidate_item.clip
    references = list(
        ReferenceCaption.objects.filter(clip=clip)
        .order_by("position")
        .values_list("text", flat=True)
    )
    judgments: list[ReviewJudgment] = []
    for judgment in (
        Judgment.objects.filter(campaign_candidate=candidate_item)
        .select_related("participation__worker", "participation__qc_stats")
        .order_by("id")
    ):
        stats = getattr(judgment.participation, "qc_stats", None)
        judgments.append(
            {
                "id": judgment.pk,
                "worker": judgment.participation.worker.external_id,
                "participation": judgment.participation_id,
                "worker_status": judgment.participation.status,
                "source": judgment.source,
                "values": judgment.values,
                "reason": judgment.reason,
                "server_seconds": None
                if judgment.server_ms is None
                else round(judgment.server_ms / 1000.0, 1),
                "is_excluded": judgment.is_excluded,
                "excluded_by": judgment.excluded_by,
                "exclusion_reason": judgment.exclusion_reason,
                "worker_stats": None
                if stats is None
                else {
                    "judgments": stats.judgments,
                    "median_seconds_per_candidate": stats.median_seconds_per_candidate,
                    "speed_vs_campaign": stats.speed_vs_campaign,
                    "uniform_share": stats.uniform_share,
                    "rating_variance": stats.rating_variance,
                    "control_accuracy": stats.control_accuracy,
                    "agreement": stats.agreement,
                    "flags": stats.flags,
                },
            }
        )
    return {
        "item": item,
        "candidate_item": candidate_item,
        "candidate": candidate,
        "clip": clip,
        "references": references,
        "judgments": judgments,
        # Counted from the judgments listed, not QC's aggregate columns (stale until it runs).
        "judgments_kept": sum(1 for judgment in judgments if not judgment["is_excluded"]),
        "audit": list(
            AuditEntry.objects.filter(review_item=item)
            .select_related("actor", "undoes")
            .prefetch_related("undone_by")
            .order_by("created_at", "id")
        ),
    }


def audit_entries(*, campaign: Campaign, limit: int = 200) -> QuerySet[AuditEntry]:
    return (
        AuditEntry.objects.filter(campaign=campaign)
        .select_related("actor", "review_item", "undoes")
        .order_by("-created_at", "-id")[:limit]
    )


# ----------------------------------------------------------------------------------------------
# Leaderboard
# ----------------------------------------------------------------------------------------------


def system_leaderboard(
    *, campaign: Campaign, sort: str = "overall", descending: bool = True
) -> list[dict[str, Any]]:
    """Mean human score per captioning system and question, over the candidates that have a
    score (controls and dropped candidates left out)."""
    keys = campaign.question_keys
    annotations: dict[str, Any] = {
        f"mean_{index}": Avg(Cast(KeyTextTransform(key, "means"), FloatField()))
        for index, key in enumerate(keys)
    }
    rows = (
        CampaignCandidate.objects.filter(
            campaign=campaign, is_control=False, dropped=False, overall__isnull=False
        )
        .values("candidate__system", "candidate__system__name", "candidate__system__version")
        .annotate(
            candidates=Count("id"),
            overall=Avg("overall"),
            normalized=Avg("normalized"),
            finalised=Count("id", filter=Q(is_finalised=True)),
            **annotations,
        )
    )
    board = []
    for row in cast(list[dict[str, Any]], list(rows)):
        name = row["candidate__system__name"] or "(unknown system)"
        version = row["candidate__system__version"] or ""
        board.append(
            {
                "system": f"{name} {version}".strip(),
                "system_id": row["candidate__system"],
                "candidates": row["candidates"],
                "finalised": row["finalised"],
                "overall": row["overall"],
                "normalized": row["normalized"],
                "questions": {key: row[f"mean_{index}"] for index, key in enumerate(keys)},
            }
        )

    def value(entry: dict[str, Any]) -> Any:
        if sort == "system":
            return entry["system"]
        if sort == "candidates":
            return entry["candidates"]
        if sort in keys:
            return entry["questions"][sort]
        return entry["overall"]

    present = [entry for entry in board if value(entry) is not None]
    missing = [entry for entry in board if value(entry) is None]
    present.sort(key=value, reverse=descending)
    return present + missing
