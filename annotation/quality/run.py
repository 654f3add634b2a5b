"""Quality control of a campaign: statistics, rules, exclusions, agreement, review, aggregation.

Entry points
- `quality_after_submission(assignment_id=...)`: incremental, after every crowd submission (the
  Celery task `annotation.after_submission`): the submitting worker's statistics and rules, then
  the aggregates and review state of the candidates touched.
- `quality_sweep()`: periodic catch-up (task `annotation.quality_sweep`, beat every 5 minutes) for
  work that could not be published while the broker was down.
- `qc_run_start(campaign=...)` / `qc_run_execute(run_id=...)`: a full recompute as a `QCRun` job
  (task `annotation.qc_run`); `qc_campaign_full` is the computation itself.

A full run reads the campaign as columns (one COPY per table on PostgreSQL), computes every
worker's statistics in one vectorised pass, evaluates the rules in two rounds (first speed,
uniformity and controls; then agreement against the workers who survived the first round),
excludes the workers whose rules say "exclude", then measures agreement before and after QC,
syncs the review queue and writes the aggregates with set-based statements.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import Count, F, Max, Q
from django.utils import timezone

from annotation.models import (
    Assignment,
    AssignmentStatus,
    Campaign,
    CampaignStatus,
    Judgment,
    Participation,
    ParticipationStatus,
    QCRun,
    ReviewItem,
    ReviewStatus,
    WorkerExclusion,
    WorkerQCStats,
)
from annotation.quality.aggregation import aggregation_apply, aggregation_recompute
from annotation.quality.agreement import agreement_snapshots_store, alpha_from_columns
from annotation.quality.exclusions import (
    ExclusionDecision,
    late_judgments_exclude,
    workers_exclude,
)
from annotation.quality.loading import (
    CampaignSlice,
    campaign_median_remember,
    campaign_median_seconds,
    campaign_slice_load,
)
from annotation.quality.review import review_items_sync
from annotation.quality.rules import (
    ACTION_EXCLUDE,
    ACTION_FLAG,
    WorkerStatistics,
    excluding_rules,
    leave_one_out_agreement,
    qc_rules_merge,
    rules_evaluate,
    worker_statistics,
)
from common.jobs import JobCancelled, job_claim, job_finish, job_progress
from common.models import JobStatus

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[float, str], None]
AGREEMENT_RULE = "low_agreement"


# ----------------------------------------------------------------------------------------------
# Statistics and rules on a loaded slice
# ----------------------------------------------------------------------------------------------


def _split_rules(rules: dict[str, dict[str, Any]]) -> tuple[dict, dict]:
    first = {name: config for name, config in rules.items() if name != AGREEMENT_RULE}
    second = {AGREEMENT_RULE: rules.get(AGREEMENT_RULE, {"enabled": False})}
    return first, second


def _evaluate(
    data: CampaignSlice,
    *,
    rules: dict[str, dict[str, Any]],
    campaign_median: float | None,
    targets: np.ndarray | None = None,
) -> tuple[WorkerStatistics, dict[int, list[dict[str, Any]]], list[ExclusionDecision]]:
    """Statistics of every worker of the slice, flags of the `targets` (all by default) and the
    exclusions the rules call for (never for imported rater slots, already excluded workers or
    workers a curator re-included)."""
    workers = data.workers
    judgments = data.judgments
    count = len(workers)
    statistics = worker_statistics(
        judgments,
        data.candidates,
        data.clip_seconds,
        workers=count,
        agreement_reference=~judgments.excluded,
        campaign_median_seconds=campaign_median,
    )
    if targets is None:
        targets = np.arange(count)
    people = np.asarray([index for index in targets.tolist() if not workers.imported[index]])
    first_rules, second_rules = _split_rules(rules)
    flags = rules_evaluate(statistics, first_rules, worker_indices=people)
    eligible = ~workers.imported & ~workers.excluded & ~workers.overridden
    leaving = np.zeros(count, dtype=bool)
    for index, worker_flags in flags.items():
        if eligible[index] and excluding_rules(worker_flags):
            leaving[index] = True
    if leaving.any():
        # Agreement is measured against the workers who stay.
        reference = ~judgments.excluded & ~leaving[judgments.worker]
        pairs, agreement = leave_one_out_agreement(
            judgments, data.candidates, workers=count, reference=reference
        )
        statistics.agreement_pairs, statistics.agreement = pairs, agreement
    for index, worker_flags in rules_evaluate(
        statistics, second_rules, worker_indices=people
    ).items():
        flags.setdefault(index, []).extend(worker_flags)
    decisions: list[ExclusionDecision] = []
    for index, worker_flags in flags.items():
        rules_to_apply = excluding_rules(worker_flags)
        if workers.overridden[index]:
            for flag in worker_flags:
                if flag["action"] == ACTION_EXCLUDE:
                    flag["action"] = ACTION_FLAG
                    flag["override"] = True
        elif eligible[index] and rules_to_apply:
            decisions.append(
                ExclusionDecision(
                    participation_id=int(workers.ids[index]),
                    rules=rules_to_apply,
                    flags=worker_flags,
                )
            )
    return statistics, flags, decisions


def worker_stats_store(
    data: CampaignSlice,
    statistics: WorkerStatistics,
    flags: dict[int, list[dict[str, Any]]],
    *,
    indices: Iterable[int],
    computed_at: Any = None,
) -> int:
    """Upsert `WorkerQCStats` rows for the given worker indices (one statement per 2,000).
    `computed_at` should be when the data was read (a judgment stored after it stays stale)."""
    now = computed_at or timezone.now()
    rows = []
    for index in indices:
        row = statistics.row(index)
        rows.append(
            WorkerQCStats(
                participation_id=int(data.workers.ids[index]),
                judgments=row["judgments"],
                median_seconds_per_candidate=row["median_seconds_per_candidate"],
                speed_vs_campaign=row["speed_vs_campaign"],
                speed_vs_clip_length=row["speed_vs_clip_length"],
                uniform_share=row["uniform_share"],
                rating_variance=row["rating_variance"],
                control_items=row["control_items"],
                control_accuracy=row["control_accuracy"],
                agreement=row["agreement"],
                flags=flags.get(index, []),
                computed_at=now,
            )
        )
    if rows:
        WorkerQCStats.objects.bulk_create(
            rows,
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["participation"],
            update_fields=[
                "judgments",
                "median_seconds_per_candidate",
                "speed_vs_campaign",
                "speed_vs_clip_length",
                "uniform_share",
                "rating_variance",
                "control_items",
                "control_accuracy",
                "agreement",
                "flags",
                "computed_at",
            ],
        )
    return len(rows)


# ----------------------------------------------------------------------------------------------
# Full run
# ----------------------------------------------------------------------------------------------


def qc_campaign_full(
    *, campaign: Campaign, progress: ProgressCallback | None = None
) -> dict[str, Any]:
    """Full QC of a campaign; returns the summary stored on the QC run."""

    def report(fraction: float, message: str) -> None:
        if progress is not None:
            progress(fraction, message)

    timings: dict[str, float] = {}
    clock = time.perf_counter()
    started_at = timezone.now()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round(now - clock, 3)
        clock = now

    rules = qc_rules_merge(campaign.qc_rules)
    report(0.05, "reading judgments")
    data = campaign_slice_load(campaign=campaign)
    lap("load")
    report(0.3, "worker statistics and rules")
    alpha_before = _alphas(data)
    statistics, flags, decisions = _evaluate(data, rules=rules, campaign_median=None)
    campaign_median_remember(
        campaign=campaign,
        median=statistics.campaign_median_seconds,
        judgments=int(statistics.timed_judgments.sum()),
    )
    lap("statistics")
    report(0.45, f"excluding {len(decisions)} worker(s)")
    outcome = workers_exclude(campaign=campaign, decisions=decisions)
    newly_excluded = {exclusion.participation_id for exclusion in outcome.exclusions}
    if newly_excluded:
        leaving = np.isin(data.workers.ids, np.fromiter(newly_excluded, np.int64))
        data.judgments.excluded |= leaving[data.judgments.worker]
        data.workers.excluded |= leaving
    lap("exclusions")
    report(0.55, "storing worker statistics")
    worker_stats_store(data, statistics, flags, indices=range(len(data.workers)))
    lap("store_statistics")
    report(0.65, "agreement")
    alpha_after = _alphas(data)
    figures = {
        key: {
            "alpha_all": alpha_before[key]["alpha"],
            "alpha_kept": alpha_after[key]["alpha"],
            "items": alpha_after[key]["items"],
            "judgments": alpha_after[key]["judgments"],
        }
        for key in data.question_keys
    }
    agreement_snapshots_store(campaign=campaign, figures=figures)
    lap("agreement")
    report(0.75, "review queue and aggregation")
    with transaction.atomic():
        changed = aggregation_apply(
            data, detect_review=True, sync=review_items_sync, timings=timings
        )
    clock = time.perf_counter()
    # Submissions that arrived while this run computed: bring their candidates up to date.
    late = set(
        Judgment.objects.filter(campaign=campaign)
        .filter(Q(created_at__gte=started_at) | Q(excluded_at__gte=started_at))
        .exclude(
            participation_id__in=list(newly_excluded)
        )  # already folded into this run's columns
        .values_list("campaign_candidate_id", flat=True)
    )
    if late:
        aggregation_recompute(campaign=campaign, candidate_ids=late)
    lap("catch_up")
    report(0.95, "summary")
    summary = qc_summary(campaign=campaign)
    summary.update(
        {
            "newly_excluded": [
                {
                    "worker": data.workers.external_ids[
                        int(np.searchsorted(data.workers.ids, pid))
                    ],
                    "participation": pid,
                }
                for pid in sorted(newly_excluded)
            ],
            "judgments_newly_excluded": outcome.judgments_excluded,
            "candidates_updated": changed,
            "agreement": figures,
            "campaign_median_seconds": statistics.campaign_median_seconds,
            "timings": timings,
        }
    )
    return summary


def _alphas(data: CampaignSlice) -> dict[str, dict[str, Any]]:
    judgments = data.judgments
    usable = ~data.candidates.is_control[judgments.item]
    kept = usable & ~judgments.excluded
    result = {}
    for index, key in enumerate(data.question_keys):
        result[key] = alpha_from_columns(
            judgments.item[kept], judgments.values[kept, index], items=len(data.candidates)
        )
    return result


def qc_summary(*, campaign: Campaign) -> dict[str, Any]:
    """The state after QC, as `run_qc --json` prints it: participations evaluated, workers
    excluded now (with the rules of their standing exclusion), judgments excluded now (for any
    reason), and candidates waiting in the review queue (open or claimed)."""
    excluded = []
    participations = (
        Participation.objects.filter(campaign=campaign, status=ParticipationStatus.EXCLUDED)
        .select_related("worker")
        .order_by("worker__external_id")
    )
    standing: dict[int, list[str]] = {}
    for exclusion in WorkerExclusion.objects.filter(
        participation__campaign=campaign, reversed_at__isnull=True
    ).order_by("created_at"):
        standing.setdefault(exclusion.participation_id, [])
        for rule in exclusion.rules:
            if rule not in standing[exclusion.participation_id]:
                standing[exclusion.participation_id].append(rule)
    for participation in participations:
        excluded.append(
            {
                "worker": participation.worker.external_id,
                "rules": standing.get(participation.pk, []),
            }
        )
    return {
        "workers": Participation.objects.filter(campaign=campaign).count(),
        "excluded": excluded,
        "judgments_excluded": Judgment.objects.filter(campaign=campaign, is_excluded=True).count(),
        "review_items": ReviewItem.objects.filter(
            campaign=campaign, status__in=(ReviewStatus.OPEN, ReviewStatus.CLAIMED)
        ).count(),
    }


# ----------------------------------------------------------------------------------------------
# Incremental
# ----------------------------------------------------------------------------------------------


def workers_quality_update(
    *, campaign: Campaign, participation_ids: Iterable[int], aggregate: bool = True
) -> set[int]:
    """Statistics and rules of some workers, read from the candidates they rated (with every
    other judgment on those candidates), then the aggregates and review state of those
    candidates. Returns the candidates whose judgments an exclusion changed."""
    targets = sorted({int(value) for value in participation_ids})
    if not targets:
        return set()
    read_at = timezone.now()
    candidate_ids = set(
        Judgment.objects.filter(campaign=campaign, participation_id__in=targets).values_list(
            "campaign_candidate_id", flat=True
        )
    )
    data = campaign_slice_load(
        campaign=campaign, candidate_ids=candidate_ids, extra_participation_ids=targets
    )
    positions = np.searchsorted(data.workers.ids, np.asarray(targets, dtype=np.int64))
    statistics, flags, decisions = _evaluate(
        data,
        rules=qc_rules_merge(campaign.qc_rules),
        campaign_median=campaign_median_seconds(
            campaign=campaign, excluding_participation_ids=targets
        ),
        targets=positions,
    )
    outcome = workers_exclude(campaign=campaign, decisions=decisions)
    worker_stats_store(data, statistics, flags, indices=positions.tolist(), computed_at=read_at)
    if aggregate:
        if outcome.candidate_ids:
            # Exclusions changed judgments: aggregate from the database, not the stale columns.
            aggregation_recompute(campaign=campaign, candidate_ids=candidate_ids)
        else:
            with transaction.atomic():
                aggregation_apply(data, detect_review=True, sync=review_items_sync)
    return set(outcome.candidate_ids)


def quality_after_submission(*, assignment_id: int) -> None:
    """Incremental QC after a crowd submission: the worker's statistics and rules, then the
    aggregates and review state of every candidate the worker rated (the submitted ones
    included). One read of those candidates serves both unless an exclusion intervened."""
    assignment = (
        Assignment.objects.select_related("campaign", "participation")
        .filter(pk=assignment_id)
        .first()
    )
    if assignment is None or assignment.status != AssignmentStatus.SUBMITTED:
        return
    campaign = assignment.campaign
    participation = assignment.participation
    if participation.status == ParticipationStatus.EXCLUDED:
        late = late_judgments_exclude(campaign=campaign, participation_id=participation.pk)
        if late:
            aggregation_recompute(campaign=campaign, candidate_ids=set(late))
        return
    workers_quality_update(campaign=campaign, participation_ids=[participation.pk])


SWEEP_MAX_WORKERS = 500


def quality_catch_up_active() -> int:
    """`quality_catch_up` of every active crowd campaign (cheap where nobody is stale: two
    indexed queries); returns the workers updated."""
    updated = 0
    campaigns = Campaign.objects.filter(
        status=CampaignStatus.ACTIVE, is_imported=False
    ).values_list("id", flat=True)
    for campaign_id in campaigns:
        try:
            updated += quality_catch_up(campaign_id=campaign_id)["workers"]
        except Exception:  # one broken campaign must not stop the others
            logger.exception("quality pass of campaign %s failed", campaign_id)
    return updated


def late_judgments_exclude_all(*, campaign: Campaign) -> set[int]:
    """Exclude the still-kept judgments of every excluded worker of the campaign (stored after
    their exclusion, by a lease that was live); returns the candidates whose judgments changed."""
    touched: set[int] = set()
    late_workers = (
        Participation.objects.filter(
            campaign=campaign, status=ParticipationStatus.EXCLUDED, judgments__is_excluded=False
        )
        .values_list("id", flat=True)
        .distinct()
    )
    for participation_id in late_workers:
        touched |= set(late_judgments_exclude(campaign=campaign, participation_id=participation_id))
    return touched


def quality_catch_up(*, campaign_id: int) -> dict[str, int]:
    """The debounced after-submission pass (task `annotation.quality_catch_up`, see
    `annotation.quality.debouncing`): every worker of the campaign who submitted since their
    statistics were computed, in one pass, then the aggregates and review state of the candidates
    they rated; judgments that excluded workers stored late are excluded too."""
    campaign = Campaign.objects.filter(pk=campaign_id, is_imported=False).first()
    if campaign is None:
        return {"workers": 0, "candidates": 0}
    touched = late_judgments_exclude_all(campaign=campaign)
    if touched:
        aggregation_recompute(campaign=campaign, candidate_ids=touched)
    # `last_seen_at` moves with every submit (and every `next`): a superset of the stale workers,
    # found without reading their judgments.
    stale_ids = list(
        Participation.objects.filter(
            campaign=campaign, status=ParticipationStatus.ACTIVE, assignments_submitted__gt=0
        )
        .filter(Q(qc_stats__isnull=True) | Q(last_seen_at__gt=F("qc_stats__computed_at")))
        .values_list("id", flat=True)[:SWEEP_MAX_WORKERS]
    )
    if stale_ids:
        workers_quality_update(campaign=campaign, participation_ids=stale_ids)
    return {"workers": len(stale_ids), "candidates": len(touched)}


def quality_sweep() -> None:
    """Catch up on quality work that was missed (a broker outage, a crashed worker): workers
    whose statistics are older than their last judgment, judgments of excluded workers that are
    still kept, and candidates whose stored counts no longer match their judgments."""
    campaigns = Campaign.objects.filter(
        status__in=(CampaignStatus.ACTIVE, CampaignStatus.PAUSED), is_imported=False
    )
    for campaign in campaigns:
        try:
            quality_sweep_campaign(campaign=campaign)
        except Exception:  # one broken campaign must not stop the others
            logger.exception("quality sweep of campaign %s failed", campaign.slug)


def quality_sweep_campaign(*, campaign: Campaign) -> dict[str, int]:
    touched = late_judgments_exclude_all(campaign=campaign)
    stale = (
        Participation.objects.filter(campaign=campaign, status=ParticipationStatus.ACTIVE)
        .annotate(last_judgment=Max("judgments__created_at"), judged=Count("judgments"))
        .filter(judged__gt=0)
        .filter(Q(qc_stats__isnull=True) | Q(last_judgment__gt=F("qc_stats__computed_at")))
        .values_list("id", flat=True)[:SWEEP_MAX_WORKERS]
    )
    stale_ids = list(stale)
    if stale_ids:
        touched |= workers_quality_update(
            campaign=campaign, participation_ids=stale_ids, aggregate=False
        )
    touched |= stale_aggregate_candidates(campaign=campaign)
    if touched:
        aggregation_recompute(campaign=campaign, candidate_ids=touched)
    return {"workers": len(stale_ids), "candidates": len(touched)}


def stale_aggregate_candidates(*, campaign: Campaign) -> set[int]:
    """Candidates whose stored judgment counts differ from their judgments."""
    candidate_table = campaign.items.model._meta.db_table
    judgment_table = Judgment._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT cc.id FROM {candidate_table} cc LEFT JOIN ("
            f"SELECT campaign_candidate_id AS id, COUNT(*) AS total, "
            f"SUM(CASE WHEN is_excluded THEN 0 ELSE 1 END) AS kept "
            f"FROM {judgment_table} WHERE campaign_id = %s GROUP BY campaign_candidate_id) j "
            f"ON j.id = cc.id WHERE cc.campaign_id = %s AND ("
            f"cc.judgments_total <> COALESCE(j.total, 0) OR cc.kept_judgments <> COALESCE(j.kept, 0))",
            [campaign.pk, campaign.pk],
        )
        return {row[0] for row in cursor.fetchall()}


# ----------------------------------------------------------------------------------------------
# QC runs (jobs)
# ----------------------------------------------------------------------------------------------


def qc_run_start(*, campaign: Campaign, requested_by: Any = None) -> QCRun:
    """Queue a full QC recompute (returns the run already queued or running, if any)."""
    from annotation.tasks import qc_run
    from common.tasks import enqueue

    with transaction.atomic():
        Campaign.objects.select_for_update().filter(pk=campaign.pk).first()
        active = QCRun.objects.filter(campaign=campaign).active().first()
        if active is not None:
            return active
        run = QCRun.objects.create(
            campaign=campaign,
            requested_by=requested_by if getattr(requested_by, "pk", None) else None,
        )
        enqueue(qc_run, run.pk)
    return run


def qc_run_execute(*, run_id: int, task_id: str = "") -> QCRun | None:
    """Run a queued QC run (claimed atomically: two workers never run the same one)."""
    run = job_claim(model=QCRun, job_id=run_id, task_id=task_id)
    if run is None:
        return None

    def progress(fraction: float, message: str) -> None:
        job_progress(job=run, fraction=fraction, message=message)

    try:
        summary = qc_campaign_full(campaign=run.campaign, progress=progress)
    except JobCancelled:
        job_finish(job=run, status=JobStatus.CANCELLED, error="cancelled by a curator")
        return run
    except Exception as error:
        logger.exception("QC run %s failed", run_id)
        job_finish(
            job=run,
            status=JobStatus.FAILED,
            error=f"{type(error).__name__}: {error}\n{traceback.format_exc()}",
        )
        return run
    job_finish(job=run, status=JobStatus.SUCCEEDED, summary=_json_safe(summary))
    return run


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value
