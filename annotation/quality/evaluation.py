"""Statistics and rules of the workers of a loaded slice, and their storage.

Shared by the full run (`annotation.quality.run`) and the incremental passes
(`annotation.quality.incremental`). Rules are evaluated in two rounds: first speed, uniformity
and controls; then agreement, measured against the workers who survive the first round.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from django.utils import timezone

from annotation.models import WorkerQCStats
from annotation.quality.consistency import RULE as RETEST_RULE
from annotation.quality.consistency import worker_retest_figures
from annotation.quality.exclusions import ExclusionDecision
from annotation.quality.loading import CampaignSlice
from annotation.quality.rules import (
    ACTION_EXCLUDE,
    ACTION_FLAG,
    WorkerStatistics,
    excluding_rules,
    leave_one_out_agreement,
    rules_evaluate,
    worker_statistics,
)

AGREEMENT_RULE = "low_agreement"


def _split_rules(rules: dict[str, dict[str, Any]]) -> tuple[dict, dict]:
    first = {name: config for name, config in rules.items() if name != AGREEMENT_RULE}
    second = {AGREEMENT_RULE: rules.get(AGREEMENT_RULE, {"enabled": False})}
    return first, second


def workers_evaluate(
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
    if rules.get(RETEST_RULE, {}).get("enabled") and count:
        statistics.retest_pairs, statistics.retest_kappa = worker_retest_figures(
            campaign=data.campaign, participation_ids=workers.ids
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
