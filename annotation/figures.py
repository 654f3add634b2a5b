"""The figures of a campaign, each computed once, here: what the campaign list, the campaign page,
the campaigns API, the quality summary API and the campaigns CSV show (docs/figures.md defines
every word).

Why one module: the pages used to count the same things in different ways. The list showed the
assignment engine's counter `slots_taken` (leased slots plus kept judgments, "24 / 432") while the
campaign page showed judgments ("6 judgments, 426 still needed"); "complete" was the aggregate
column `is_finalised`, which an imported campaign only gets after its first QC run ("0 of 144
complete" beside "432 / 432"); and every judgment imported today counted as today's pace, so a
closed imported campaign had an "estimated completion" date. Here every figure is counted from
the judgments themselves in one grouped query per call (for one campaign or a whole list), never
from a counter a job may not have refreshed yet.

Selectors, one per figure group:
- `campaign_figures` / `campaigns_figures`: candidates, slots, judgments and completeness;
- `campaign_completion_estimate`: the estimated completion date, or why there is none;
- `campaign_agreement_figures`: the latest measured Krippendorff's alpha per question, or why
  there is none;
- `candidates_with_judgment_counts`: a candidate's judgments and kept judgments (the data
  browser's candidate list and clip page; the candidate page counts the judgments it lists);
- `campaign_metric_agreement`: the campaign metric against the crowd (Kendall's tau so far and
  the candidates where they disagree most; issue 28).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotation.models import (
    AgreementSnapshot,
    Assignment,
    AssignmentItem,
    AssignmentStatus,
    Campaign,
    CampaignCandidate,
    CampaignStatus,
    Judgment,
    JudgmentSource,
    QCRun,
    ReviewItem,
    ReviewStatus,
)
from common.spreadsheet import spreadsheet_safe

# The days of crowd work the completion estimate takes its pace from.
PACE_DAYS = 7


@dataclass(frozen=True)
class CampaignFigures:
    """Counts of one campaign. Control items are left out of every figure but `control_items`;
    dropped candidates are left out of the slot figures and of `candidates_complete`."""

    campaign_id: int
    candidates: int
    control_items: int
    candidates_dropped: int
    candidates_complete: int
    slots_total: int
    slots_filled: int
    slots_in_progress: int
    judgments: int
    judgments_kept: int
    judgments_excluded: int
    # Adaptive allocation: slots the candidates still wanting judgments may yet open, up to the
    # policy's maximum (0 under the fixed policy).
    slots_may_open: int = 0

    @property
    def candidates_in_play(self) -> int:
        return self.candidates - self.candidates_dropped

    @property
    def judgments_needed(self) -> int:
        return self.slots_total - self.slots_filled

    @property
    def judgments_needed_at_most(self) -> int:
        """An upper bound of the kept judgments still needed: `judgments_needed` plus every slot
        an unsettled candidate of an adaptive campaign may yet open (none for a fixed one)."""
        return self.judgments_needed + self.slots_may_open

    @property
    def percent_complete(self) -> float:
        in_play = self.candidates_in_play
        return round(100.0 * self.candidates_complete / in_play, 1) if in_play else 0.0

    @property
    def percent_filled(self) -> float:
        return round(100.0 * self.slots_filled / self.slots_total, 1) if self.slots_total else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Every figure by name (the API and CSV field names), in `FIGURE_NAMES` order."""
        return {name: getattr(self, name) for name in FIGURE_NAMES}


# The order of the figures in the API and the CSV.
FIGURE_NAMES: tuple[str, ...] = (
    "candidates",
    "control_items",
    "candidates_dropped",
    "candidates_in_play",
    "candidates_complete",
    "percent_complete",
    "slots_total",
    "slots_filled",
    "slots_in_progress",
    "percent_filled",
    "judgments",
    "judgments_kept",
    "judgments_excluded",
    "judgments_needed",
    "judgments_needed_at_most",
)


def _figures_sql() -> str:
    candidate = CampaignCandidate._meta.db_table
    judgment = Judgment._meta.db_table
    item = AssignmentItem._meta.db_table
    assignment = Assignment._meta.db_table
    review = ReviewItem._meta.db_table
    campaign = Campaign._meta.db_table
    in_play = "NOT cc.is_control AND NOT cc.dropped"
    # Per candidate first (judgments, live slots, a resolved review), then per campaign; each
    # per-candidate subquery is grouped on its own so no count multiplies another.
    return f"""
        SELECT cc.campaign_id,
          COUNT(*) FILTER (WHERE NOT cc.is_control),
          COUNT(*) FILTER (WHERE cc.is_control),
          COUNT(*) FILTER (WHERE NOT cc.is_control AND cc.dropped),
          COUNT(*) FILTER (WHERE {in_play}
                           AND (COALESCE(j.kept, 0) >= cc.quota OR r.resolved IS NOT NULL)),
          COALESCE(SUM(cc.quota) FILTER (WHERE {in_play}), 0),
          COALESCE(SUM(LEAST(COALESCE(j.kept, 0), cc.quota)) FILTER (WHERE {in_play}), 0),
          COALESCE(SUM(l.live) FILTER (WHERE {in_play}), 0),
          COALESCE(SUM(j.total) FILTER (WHERE NOT cc.is_control), 0),
          COALESCE(SUM(j.kept) FILTER (WHERE NOT cc.is_control), 0),
          COALESCE(SUM(GREATEST(0, (c.allocation ->> 'maximum')::int - cc.quota))
                   FILTER (WHERE {in_play} AND cc.stop_reason = ''
                           AND c.allocation ->> 'kind' = 'adaptive'), 0)
        FROM {candidate} cc
        JOIN {campaign} c ON c.id = cc.campaign_id
        LEFT JOIN (
          SELECT campaign_candidate_id AS id, COUNT(*) AS total,
                 COUNT(*) FILTER (WHERE NOT is_excluded) AS kept
          FROM {judgment} WHERE campaign_id = ANY(%(ids)s) GROUP BY campaign_candidate_id
        ) j ON j.id = cc.id
        LEFT JOIN (
          SELECT ai.campaign_candidate_id AS id, COUNT(*) AS live
          FROM {item} ai JOIN {assignment} a ON a.id = ai.assignment_id
          WHERE a.campaign_id = ANY(%(ids)s) AND a.status = %(live)s
          GROUP BY ai.campaign_candidate_id
        ) l ON l.id = cc.id
        LEFT JOIN (
          SELECT DISTINCT campaign_candidate_id AS id, TRUE AS resolved
          FROM {review} WHERE campaign_id = ANY(%(ids)s) AND status = %(resolved)s
        ) r ON r.id = cc.id
        WHERE cc.campaign_id = ANY(%(ids)s)
        GROUP BY cc.campaign_id
    """


def campaigns_figures(*, campaign_ids: Iterable[int]) -> dict[int, CampaignFigures]:
    """The figures of several campaigns in one query (the campaign list), by campaign id; a
    campaign without candidates gets zeros."""
    ids = sorted(set(campaign_ids))
    figures = {campaign_id: CampaignFigures(campaign_id, *([0] * 10)) for campaign_id in ids}
    if not ids:
        return figures
    with connection.cursor() as cursor:
        cursor.execute(
            _figures_sql(),
            {"ids": ids, "live": AssignmentStatus.LIVE, "resolved": ReviewStatus.RESOLVED},
        )
        for row in cursor.fetchall():
            (campaign_id, candidates, controls, dropped, complete, total, filled, leased,
             judgments, kept, may_open) = (int(value) for value in row)  # fmt: skip
            figures[campaign_id] = CampaignFigures(
                campaign_id=campaign_id,
                candidates=candidates,
                control_items=controls,
                candidates_dropped=dropped,
                candidates_complete=complete,
                slots_total=total,
                slots_filled=filled,
                slots_in_progress=leased,
                judgments=judgments,
                judgments_kept=kept,
                judgments_excluded=judgments - kept,
                slots_may_open=may_open,
            )
    return figures


def campaign_figures(*, campaign: Campaign) -> CampaignFigures:
    """The figures of one campaign (the campaign page, the quality summary)."""
    return campaigns_figures(campaign_ids=[campaign.pk])[campaign.pk]


def campaigns_with_figures(campaigns: Iterable[Campaign]) -> list[Campaign]:
    """The campaigns, each carrying its figures as `.figures` (the list page, the campaigns API
    and CSV), counted in one query."""
    rows = list(campaigns)
    figures = campaigns_figures(campaign_ids=[campaign.pk for campaign in rows])
    for campaign in rows:
        campaign.figures = figures[campaign.pk]  # type: ignore[attr-defined]
    return rows


CSV_COLUMNS = ("slug", "name", "status", "imported", "clips", "workers", *FIGURE_NAMES)


def campaigns_csv(campaigns: Iterable[Campaign]) -> str:
    """The campaign list as CSV: one row per campaign, its figures under their API names.
    `campaigns` carry `clip_count` and `participation_count` (`campaigns_with_counts`). Text cells
    are spreadsheet-safe (`common.spreadsheet`); figures are numbers and stay as they are."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for campaign in campaigns_with_figures(campaigns):
        values = campaign.figures.as_dict()  # type: ignore[attr-defined]
        writer.writerow(
            [
                spreadsheet_safe(campaign.slug),
                spreadsheet_safe(campaign.name),
                campaign.status,
                "yes" if campaign.is_imported else "no",
                campaign.clip_count,  # type: ignore[attr-defined]
                campaign.participation_count,  # type: ignore[attr-defined]
                *(values[name] for name in FIGURE_NAMES),
            ]
        )
    return buffer.getvalue()


# ----------------------------------------------------------------------------------------------
# Per candidate
# ----------------------------------------------------------------------------------------------


def candidates_with_judgment_counts(
    items: QuerySet[CampaignCandidate],
) -> QuerySet[CampaignCandidate]:
    """`items` each annotated with `judgment_count` (kept or excluded) and `kept_count`, counted
    from the judgments, never from the aggregate columns `judgments_total`/`kept_judgments`
    (QC's, which an imported campaign only gets at its first run: the browser showed "0 (0)"
    for a candidate whose page listed 3 judgments). Correlated subqueries, which PostgreSQL
    evaluates for the rows a page returns only (through the judgment's candidate index)."""
    judgments = Judgment.objects.filter(campaign_candidate=OuterRef("pk")).order_by()

    def counted(rows: QuerySet[Judgment]) -> Coalesce:
        count = rows.values("campaign_candidate").annotate(n=Count("pk")).values("n")
        return Coalesce(Subquery(count, output_field=IntegerField()), 0)

    return items.annotate(
        judgment_count=counted(judgments),
        kept_count=counted(judgments.filter(is_excluded=False)),
    )


# ----------------------------------------------------------------------------------------------
# Completion estimate
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompletionEstimate:
    """`estimated` is None exactly when `reason` says why."""

    estimated: date | None
    judgments_per_day: float
    reason: str
    # Adaptive allocation: the date by which even every slot that may still open would be in
    # (from `judgments_needed_at_most`); None when it is the estimate itself or there is none.
    latest: date | None = None


def campaign_completion_estimate(
    *, campaign: Campaign, figures: CampaignFigures
) -> CompletionEstimate:
    """When the judgments still needed will be in at the pace of the last seven days of crowd
    work (imported judgments are not a pace). Closed, imported and complete campaigns have none."""
    since = timezone.now() - timedelta(days=PACE_DAYS)
    recent = Judgment.objects.filter(
        campaign=campaign,
        source=JudgmentSource.CROWD,
        created_at__gte=since,
        campaign_candidate__is_control=False,
    ).count()
    pace = round(recent / PACE_DAYS, 2)
    if campaign.is_imported:
        return CompletionEstimate(None, pace, "imported campaign: no crowd work to wait for")
    if campaign.status == CampaignStatus.CLOSED:
        return CompletionEstimate(None, pace, "the campaign is closed")
    if figures.slots_total and figures.judgments_needed == 0:
        return CompletionEstimate(None, pace, "every slot is filled")
    if figures.slots_total == 0:
        return CompletionEstimate(None, pace, "the campaign has no candidates")
    if pace == 0:
        return CompletionEstimate(None, pace, "no crowd judgments in the last seven days")
    today = timezone.now().date()
    days = math.ceil(figures.judgments_needed / (recent / PACE_DAYS))
    latest = None
    if figures.slots_may_open:
        latest = today + timedelta(
            days=math.ceil(figures.judgments_needed_at_most / (recent / PACE_DAYS))
        )
    return CompletionEstimate(today + timedelta(days=days), pace, "", latest)


# ----------------------------------------------------------------------------------------------
# Agreement
# ----------------------------------------------------------------------------------------------

QC_NOT_RUN = "QC has not run yet"
NO_PAIRS = "no candidate has 2 kept judgments yet"
NO_VARIATION = "the ratings do not vary, so alpha is undefined"


def campaign_agreement_figures(*, campaign: Campaign) -> dict[str, dict[str, Any]]:
    """Per question: the alpha of the latest QC measurement (before QC: every judgment; after QC:
    kept ones), the candidates and judgments it covers, when it was measured, and `reason`, the
    words shown instead of a missing alpha (empty when both alphas are there)."""
    latest = {}
    measured_at = (
        AgreementSnapshot.objects.filter(campaign=campaign)
        .order_by("-computed_at")
        .values_list("computed_at", flat=True)
        .first()
    )
    if measured_at is not None:
        for row in AgreementSnapshot.objects.filter(campaign=campaign, computed_at=measured_at):
            latest[row.question_key] = row
    has_run = measured_at is not None or QCRun.objects.filter(campaign=campaign).exists()
    result: dict[str, dict[str, Any]] = {}
    for key in campaign.question_keys:
        snapshot = latest.get(key)
        if snapshot is None:
            result[key] = {
                "alpha_all": None,
                "alpha_kept": None,
                "items": 0,
                "judgments": 0,
                "computed_at": None,
                "reason": NO_PAIRS if has_run else QC_NOT_RUN,
            }
            continue
        reason = ""
        if snapshot.items == 0:
            reason = NO_PAIRS
        elif snapshot.alpha_all is None or snapshot.alpha_kept is None:
            reason = NO_VARIATION
        result[key] = {
            "alpha_all": snapshot.alpha_all,
            "alpha_kept": snapshot.alpha_kept,
            "items": snapshot.items,
            "judgments": snapshot.judgments,
            "computed_at": snapshot.computed_at,
            "reason": reason,
        }
    return result


# --- the metric in the loop ---------------------------------------------------------------------

NO_METRIC = "the campaign names no metric"
TOO_FEW_PAIRS = "fewer than 2 candidates have both a metric score and a kept rating"
NO_TAU = "the scores or the crowd means do not vary, so tau is undefined"
DISAGREEMENTS_SHOWN = 10


@dataclass(frozen=True)
class MetricDisagreement:
    """A candidate, its metric score and its crowd mean (same scale), and their difference."""

    campaign_candidate_id: int
    clip: str
    candidate: str
    metric_score: float
    crowd_mean: float
    difference: float  # metric − crowd


@dataclass(frozen=True)
class MetricAgreement:
    """The campaign metric against the crowd so far, over the candidates (controls and dropped ones
    left out) that have both a metric score and at least one kept rating (`pairs`)."""

    metric: str
    candidates_scored: int
    pairs: int
    kendall_tau: float | None  # tau-b, as scipy computes it; None with `reason`
    reason: str
    disagreements: list[MetricDisagreement]  # the largest |difference| first, at most 10


def _crowd_means(campaign: Campaign, item_ids: list[int]) -> dict[int, float]:
    """Each candidate's crowd mean of the overall, from its kept judgments: the overall question's
    mean where the campaign names one, else the mean of its questions' means (the aggregate's
    rule, `annotation.quality.statistics.overall_scores`), rounded to 9 places."""
    keys = campaign.question_keys
    if campaign.overall_question_key in keys:
        keys = [campaign.overall_question_key]
    sums: dict[int, dict[str, list[float]]] = {}
    rows = Judgment.objects.filter(campaign_candidate_id__in=item_ids, is_excluded=False)
    for item_id, values in rows.values_list("campaign_candidate_id", "values").iterator():
        per_key = sums.setdefault(item_id, {})
        for key in keys:
            if isinstance(values.get(key), int | float):
                per_key.setdefault(key, []).append(float(values[key]))
    means = {}
    for item_id, per_key in sums.items():
        question_means = [sum(found) / len(found) for found in per_key.values() if found]
        if question_means:
            means[item_id] = round(sum(question_means) / len(question_means), 9)
    return means


def campaign_metric_agreement(*, campaign: Campaign) -> MetricAgreement:
    """Kendall's tau between the metric's scores and the crowd means, and the candidates where
    they disagree most (docs/quality.md, "The metric in the loop")."""
    from scipy.stats import kendalltau

    scored = list(
        CampaignCandidate.objects.filter(
            campaign=campaign, is_control=False, dropped=False, metric_score__isnull=False
        ).values_list("id", "metric_score", "clip__vatex_id", "candidate__text")
    )
    crowd = _crowd_means(campaign, [row[0] for row in scored])
    pairs = [
        MetricDisagreement(item_id, clip, text, score, crowd[item_id], score - crowd[item_id])
        for item_id, score, clip, text in scored
        if item_id in crowd and score is not None
    ]
    tau: float | None = None
    reason = "" if campaign.metric else NO_METRIC
    if len(pairs) < 2:
        reason = reason or TOO_FEW_PAIRS
    else:
        value = kendalltau([p.metric_score for p in pairs], [p.crowd_mean for p in pairs])[0]
        tau = None if math.isnan(value) else float(value)
        reason = reason or ("" if tau is not None else NO_TAU)
    pairs.sort(key=lambda pair: (-abs(pair.difference), pair.campaign_candidate_id))
    return MetricAgreement(
        campaign.metric, len(scored), len(pairs), tau, reason, pairs[:DISAGREEMENTS_SHOWN]
    )
