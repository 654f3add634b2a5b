"""A full quality-control run of a campaign, as a `QCRun` job.

- `qc_run_start(campaign=...)` queues a run (task `annotation.qc_run`, enqueued after commit),
  `qc_run_inline(campaign=...)` runs one in this process (the command line);
  `qc_run_execute(run_id=...)` claims and executes it (`common.jobs`); `qc_campaign_full` is the
  computation itself and `qc_summary` the state after it (what `run_qc --json` prints).
- The passes between runs (after submissions, the sweep) are in `annotation.quality.incremental`.

A full run reads the campaign as columns (one COPY per table on PostgreSQL), computes every
worker's statistics in one vectorised pass, evaluates the rules in two rounds (first speed,
uniformity and controls; then agreement against the workers who survived the first round),
excludes the workers whose rules say "exclude", then measures agreement before and after QC,
syncs the review queue and writes the aggregates with set-based statements.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict

import numpy as np
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotation.models import (
    Campaign,
    Judgment,
    Participation,
    ParticipationStatus,
    QCRun,
    ReviewItem,
    ReviewStatus,
    WorkerExclusion,
)
from annotation.quality.aggregation import aggregation_apply, aggregation_recompute
from annotation.quality.agreement import (
    Alpha,
    AlphaFigures,
    agreement_snapshots_store,
    alpha_from_columns,
)
from annotation.quality.evaluation import worker_stats_store, workers_evaluate
from annotation.quality.exclusions import workers_exclude
from annotation.quality.jobs import ProgressCallback, campaign_run_inline, campaign_run_queue
from annotation.quality.loading import CampaignSlice, campaign_median_remember, campaign_slice_load
from annotation.quality.rules import qc_rules_merge
from common.jobs import job_execute

logger = logging.getLogger(__name__)


class _Stopwatch:
    """Seconds per step of a run, into the summary's `timings`."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self.clock = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(now - self.clock, 3)
        self.clock = now

    def restart(self) -> None:
        self.clock = time.perf_counter()


def qc_campaign_full(
    *, campaign: Campaign, progress: ProgressCallback | None = None
) -> QCRunSummary:
    """Full QC of a campaign; returns the summary stored on the QC run."""

    def report(fraction: float, message: str) -> None:
        if progress is not None:
            progress(fraction, message)

    stopwatch = _Stopwatch()
    started_at = timezone.now()
    rules = qc_rules_merge(campaign.qc_rules)
    report(0.05, "reading judgments")
    data = campaign_slice_load(campaign=campaign)
    stopwatch.lap("load")
    report(0.3, "worker statistics and rules")
    statistics, flags, decisions = workers_evaluate(data, rules=rules, campaign_median=None)
    campaign_median_remember(
        campaign=campaign,
        median=statistics.campaign_median_seconds,
        judgments=int(statistics.timed_judgments.sum()),
    )
    stopwatch.lap("statistics")
    report(0.45, f"excluding {len(decisions)} worker(s)")
    # Agreement before QC (every judgment: it reads neither the exclusion flags nor the
    # database) is computed by a thread while this one waits on the exclusions' statements,
    # which release the GIL: about 0.2 s of NumPy at a million judgments off the run's path.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="qc-alpha") as pool:
        alpha_before_pending = pool.submit(_alphas, data, kept_only=False)
        outcome = workers_exclude(campaign=campaign, decisions=decisions)
        alpha_before = alpha_before_pending.result()
    newly_excluded = {exclusion.participation_id for exclusion in outcome.exclusions}
    if newly_excluded:
        leaving = np.isin(data.workers.ids, np.fromiter(newly_excluded, np.int64))
        data.judgments.excluded |= leaving[data.judgments.worker]
        data.workers.excluded |= leaving
    stopwatch.lap("exclusions")
    report(0.55, "storing worker statistics")
    # No running statistics: the run clears every worker's (`running=None`), so each worker's next
    # after-submission pass reads all their judgments once and stores a fresh state. Computing
    # and writing 10,000 states here cost the cold run at a million judgments 1.1 - 1.2 s of its
    # store-statistics phase (docs/benchmarks.md, "Cold start, stop 38"); full runs are rare.
    worker_stats_store(data, statistics, flags, indices=range(len(data.workers)), running=None)
    stopwatch.lap("store_statistics")
    report(0.65, "agreement")
    figures = _agreement_figures(data, alpha_before, _alphas(data, kept_only=True))
    agreement_snapshots_store(campaign=campaign, figures=figures)
    stopwatch.lap("agreement")
    report(0.75, "review queue and aggregation")
    with transaction.atomic():
        changed = aggregation_apply(data, detect_review=True, timings=stopwatch.timings, push=False)
    stopwatch.restart()
    late = _late_candidates(campaign, started_at=started_at, newly_excluded=newly_excluded)
    if late:
        aggregation_recompute(campaign=campaign, candidate_ids=late)
    stopwatch.lap("catch_up")
    report(0.95, "summary")
    return {
        **qc_summary(campaign=campaign),
        "newly_excluded": [
            {
                "worker": data.workers.external_ids[int(np.searchsorted(data.workers.ids, pid))],
                "participation": pid,
            }
            for pid in sorted(newly_excluded)
        ],
        "judgments_newly_excluded": outcome.judgments_excluded,
        "candidates_updated": changed,
        "agreement": figures,
        "campaign_median_seconds": statistics.campaign_median_seconds,
        "timings": stopwatch.timings,
    }


def _agreement_figures(
    data: CampaignSlice, before: dict[str, Alpha], after: dict[str, Alpha]
) -> dict[str, AlphaFigures]:
    return {
        key: {
            "alpha_all": before[key]["alpha"],
            "alpha_kept": after[key]["alpha"],
            "items": after[key]["items"],
            "judgments": after[key]["judgments"],
        }
        for key in data.question_keys
    }


def _late_candidates(campaign: Campaign, *, started_at: Any, newly_excluded: set[int]) -> set[int]:
    """Candidates of submissions (or exclusions) that arrived while the run computed: brought up
    to date after it. The run's own exclusions are already folded into its columns."""
    return set(
        Judgment.objects.filter(campaign=campaign)
        .filter(Q(created_at__gte=started_at) | Q(excluded_at__gte=started_at))
        .exclude(participation_id__in=list(newly_excluded))
        .values_list("campaign_candidate_id", flat=True)
    )


def _alphas(data: CampaignSlice, *, kept_only: bool) -> dict[str, Alpha]:
    """Alpha per question over the campaign's judgments (controls left out): every judgment
    (before QC, docs/figures.md) or the kept ones (after QC). Before QC is every judgment, not
    the judgments kept when this run started: those already lack what earlier runs, the passes
    after submissions and curators excluded, and this run's "before" read 0.998 beside the
    agreement API's 0.861 on the same data."""
    judgments = data.judgments
    chosen = ~data.candidates.is_control[judgments.item]
    if kept_only:
        chosen &= ~judgments.excluded
    result = {}
    for index, key in enumerate(data.question_keys):
        result[key] = alpha_from_columns(
            judgments.item[chosen], judgments.values[chosen, index], items=len(data.candidates)
        )
    return result


class WorkerRules(TypedDict):
    worker: str
    rules: list[str]


class QCSummary(TypedDict):
    workers: int
    excluded: list[WorkerRules]
    flagged: list[WorkerRules]
    judgments_excluded: int
    review_items: int


class NewlyExcluded(TypedDict):
    worker: str
    participation: int


class QCRunSummary(QCSummary):
    """What a full run stores on its `QCRun` (the state after it, then what it did)."""

    newly_excluded: list[NewlyExcluded]
    judgments_newly_excluded: int
    candidates_updated: int
    agreement: dict[str, AlphaFigures]
    campaign_median_seconds: float | None
    timings: dict[str, float]


def qc_summary(*, campaign: Campaign) -> QCSummary:
    """The state after QC, as `run_qc --json` prints it: participations evaluated, workers
    excluded now (with the rules of their standing exclusion), workers not excluded whom a rule
    flags (for a curator to look at: a rule set to flag, too little evidence yet to act, or a
    worker a curator re-included), judgments excluded now (for any reason), and candidates
    waiting in the review queue (open or claimed)."""
    excluded: list[WorkerRules] = []
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
    flagged: list[WorkerRules] = [
        {"worker": external_id, "rules": list(dict.fromkeys(flag["rule"] for flag in flags))}
        for external_id, flags in Participation.objects.filter(
            campaign=campaign, qc_stats__isnull=False
        )
        .exclude(status=ParticipationStatus.EXCLUDED)
        .order_by("worker__external_id")
        .values_list("worker__external_id", "qc_stats__flags")
        if flags
    ]
    return {
        "workers": Participation.objects.filter(campaign=campaign).count(),
        "excluded": excluded,
        "flagged": flagged,
        "judgments_excluded": Judgment.objects.filter(campaign=campaign, is_excluded=True).count(),
        "review_items": ReviewItem.objects.filter(
            campaign=campaign, status__in=(ReviewStatus.OPEN, ReviewStatus.CLAIMED)
        ).count(),
    }


# ----------------------------------------------------------------------------------------------
# QC runs (jobs)
# ----------------------------------------------------------------------------------------------


def qc_run_start(*, campaign: Campaign, requested_by: Any = None) -> QCRun:
    """Queue a full QC recompute (returns the run already queued or running, if any)."""
    from common.tasks import task_named

    return campaign_run_queue(
        model=QCRun,
        campaign=campaign,
        task=task_named("annotation.qc_run"),
        requested_by=requested_by,
    )


def qc_run_inline(*, campaign: Campaign) -> QCRun:
    """A full QC run executed in this process (`manage.py run_qc`): the same `QCRun` row and job
    lifecycle as a queued run, without the broker. Returns the finished run."""
    return campaign_run_inline(model=QCRun, campaign=campaign, execute=qc_run_execute)


def qc_run_execute(*, run_id: int, task_id: str = "") -> QCRun | None:
    """Run a queued QC run (claimed atomically: two workers never run the same one)."""
    run, succeeded = job_execute(
        model=QCRun,
        job_id=run_id,
        task_id=task_id,
        work=lambda run, progress: qc_campaign_full(campaign=run.campaign, progress=progress),
    )
    if run is not None and succeeded:
        # Severities are estimated from the judgments QC kept: calibrate after every run.
        from annotation.quality.calibration_job import calibration_run_start

        calibration_run_start(campaign=run.campaign, qc_run=run)
    return run
