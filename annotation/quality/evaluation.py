"""Statistics and rules of the workers of a loaded slice, and their storage.

Shared by the full run (`annotation.quality.run`) and the incremental passes
(`annotation.quality.incremental`). Rules are evaluated in two rounds: first speed, uniformity
and controls; then agreement, measured against the workers who survive the first round.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Literal, get_args

import numpy as np
from django.db import connection, transaction
from django.utils import timezone
from numpy.typing import NDArray

from annotation.crowd.services.columns import copy_to_temp_table, json_text, pg_array
from annotation.models import WorkerQCStats
from annotation.quality.consistency import RULE as RETEST_RULE
from annotation.quality.consistency import worker_retest_figures
from annotation.quality.exclusions import ExclusionDecision
from annotation.quality.loading import CampaignSlice
from annotation.quality.rules import (
    ACTION_EXCLUDE,
    ACTION_FLAG,
    RULES,
    FlagJson,
    RuleConfig,
    RuleFlag,
    excluding_rules,
    rule_configs,
    rules_evaluate,
)
from annotation.quality.running import RunningState
from annotation.quality.running_store import running_states_write
from annotation.quality.statistics import (
    ReferenceSums,
    StatisticsRow,
    WorkerStatistics,
    leave_one_out_agreement,
    reference_sums_without,
    worker_statistics,
)

# Rules that measure a worker against the others wait for the first round's exclusions.
_AFTER_EXCLUSIONS = frozenset(rule.name for rule in RULES if rule.after_exclusions)


def _split_rules(
    configs: dict[str, RuleConfig],
) -> tuple[dict[str, RuleConfig], dict[str, RuleConfig]]:
    first = {name: config for name, config in configs.items() if name not in _AFTER_EXCLUSIONS}
    second = {name: config for name, config in configs.items() if name in _AFTER_EXCLUSIONS}
    return first, second


class IncompleteSlice(Exception):
    """The first round excludes a worker whose judgments the slice holds only in part."""


def _statistics(
    data: CampaignSlice, campaign_median: float | None, agreement_sums: ReferenceSums | None
) -> WorkerStatistics:
    return worker_statistics(
        data.judgments,
        data.candidates,
        data.clip_seconds,
        workers=len(data.workers),
        agreement_reference=~data.judgments.excluded,
        campaign_median_seconds=campaign_median,
        agreement_sums=agreement_sums,
    )


def workers_evaluate(
    data: CampaignSlice,
    *,
    rules: dict[str, dict[str, Any]],
    campaign_median: float | None,
    targets: np.ndarray | None = None,
    agreement_sums: ReferenceSums | None = None,
    statistics: WorkerStatistics | None = None,
) -> tuple[WorkerStatistics, dict[int, list[RuleFlag]], list[ExclusionDecision]]:
    """Statistics of every worker of the slice, flags of the `targets` (all by default) and the
    exclusions the rules call for (never for imported rater slots, already excluded workers or
    workers a curator re-included).

    Without `agreement_sums` the slice holds every judgment on its candidates; with them (the
    kept judgments' sums per candidate and question, read by the database) it may hold only the
    judgments of the workers to measure, and every worker the first round excludes must be
    among them (their judgments leave the sums before the second round).

    `statistics` computed elsewhere (a pass's running statistics) may come from a slice with
    part of the workers' judgments: if the first round excludes anyone, the second round cannot
    take their judgments out of the sums; `IncompleteSlice` asks the caller to read all."""
    workers = data.workers
    judgments = data.judgments
    count = len(workers)
    complete = statistics is None
    if statistics is None:
        statistics = _statistics(data, campaign_median, agreement_sums)
    configs = rule_configs(rules)
    retest = configs.get(RETEST_RULE)
    if retest is not None and retest.enabled and count:
        statistics.retest_pairs, statistics.retest_kappa = worker_retest_figures(
            campaign=data.campaign, participation_ids=workers.ids
        )
    if targets is None:
        targets = np.arange(count)
    people = np.asarray([index for index in targets.tolist() if not workers.imported[index]])
    first_rules, second_rules = _split_rules(configs)
    flags = rules_evaluate(statistics, first_rules, worker_indices=people)
    eligible = ~workers.imported & ~workers.excluded & ~workers.overridden
    leaving = np.zeros(count, dtype=bool)
    for index, worker_flags in flags.items():
        if eligible[index] and excluding_rules(worker_flags):
            leaving[index] = True
    if leaving.any():
        if not complete:
            raise IncompleteSlice
        # Agreement is measured against the workers who stay.
        reference = ~judgments.excluded & ~leaving[judgments.worker]
        sums = None
        if agreement_sums is not None:
            sums = reference_sums_without(
                agreement_sums, judgments, leaving=~judgments.excluded & leaving[judgments.worker]
            )
        pairs, agreement = leave_one_out_agreement(
            judgments, data.candidates, workers=count, reference=reference, sums=sums
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
            flags[index] = [
                replace(flag, action=ACTION_FLAG, override=True)
                if flag.action == ACTION_EXCLUDE
                else flag
                for flag in worker_flags
            ]
        elif eligible[index] and rules_to_apply:
            decisions.append(
                ExclusionDecision(
                    participation_id=int(workers.ids[index]),
                    rules=rules_to_apply,
                    flags=worker_flags,
                )
            )
    return statistics, flags, decisions


# The statistic columns of `WorkerQCStats` a run writes (besides the flags and `computed_at`).
StatField = Literal[
    "judgments",
    "median_seconds_per_candidate",
    "speed_vs_campaign",
    "speed_vs_clip_length",
    "uniform_share",
    "rating_variance",
    "control_items",
    "control_accuracy",
    "agreement",
]
STAT_FIELDS: tuple[StatField, ...] = get_args(StatField)
_INTEGER_FIELDS = ("judgments", "control_items")
# What the read behind the statistics saw of the worker's judgments (see `judgments_seen`).
SEEN_FIELDS = ("through_judgment_id", "judgments_through", "kept_through")


def worker_stats_store(
    data: CampaignSlice,
    statistics: WorkerStatistics,
    flags: dict[int, list[RuleFlag]],
    *,
    indices: Iterable[int],
    computed_at: Any = None,
    seen: NDArray[np.int64] | None = None,
    running: RunningState | None = None,
    running_medians: bool = True,
) -> int:
    """Upsert `WorkerQCStats` rows for the given worker indices: one binary COPY into a temporary
    table and one INSERT ... ON CONFLICT (a full run writes 10,000 workers). `computed_at` should
    be when the data was read (a judgment stored after it stays stale). `seen`: the watermarks
    (rows: the indices; by default `judgments_seen` of `data`); `running`: the workers' running
    statistics (rows: the indices; None clears them)."""
    now = computed_at or timezone.now()
    positions = [int(index) for index in indices]
    if not positions:
        return 0
    rows = [statistics.row(index) for index in positions]
    participation_ids = [int(data.workers.ids[index]) for index in positions]
    stored_flags = [[flag.as_json() for flag in flags.get(i, [])] for i in positions]
    if seen is None:
        seen = judgments_seen(data, positions)
    with transaction.atomic():
        _stats_upsert(participation_ids, rows, stored_flags, now, seen=seen)
        running_states_write(participation_ids, running, medians=running_medians)
    return len(rows)


def judgments_seen(data: CampaignSlice, positions: list[int]) -> NDArray[np.int64]:
    """Per worker at `positions` (rows): the largest id of their judgments in `data` (0: none)
    and how many of them `data` holds, all and kept (`WorkerQCStats.through_judgment_id`,
    `judgments_through`, `kept_through`). `data` must hold every judgment of those workers (a
    full run's slice, or a pass's slice of its judges)."""
    judgments = data.judgments
    workers = len(data.workers)
    through = np.zeros(workers, dtype=np.int64)
    if len(judgments.ids):
        np.maximum.at(through, judgments.worker, judgments.ids)
    counted = np.bincount(judgments.worker, minlength=workers)
    kept = np.bincount(judgments.worker[~judgments.excluded], minlength=workers)
    chosen = np.asarray(positions, dtype=np.int64)
    return np.stack([through[chosen], counted[chosen], kept[chosen]], axis=1).astype(np.int64)


def _stats_upsert(
    participation_ids: list[int],
    rows: list[StatisticsRow],
    worker_flags: list[list[FlagJson]],
    now: Any,
    *,
    seen: NDArray[np.int64],
) -> None:
    """The values are those of `WorkerStatistics.row` (already rounded; None for "no value",
    carried as NaN through the COPY and turned back into NULL by NULLIF)."""
    columns: list[tuple[str, Any, Any]] = [
        ("position", "int8", np.arange(len(rows), dtype=np.int64)),
        ("participation_id", "int8", np.asarray(participation_ids, dtype=np.int64)),
    ]
    for name in STAT_FIELDS:
        if name in _INTEGER_FIELDS:
            columns.append((name, "int8", np.asarray([row[name] for row in rows], np.int64)))
        else:
            values = [np.nan if row[name] is None else row[name] for row in rows]
            columns.append((name, "float8", np.asarray(values, dtype=np.float64)))
    for column, seen_field in enumerate(SEEN_FIELDS):
        columns.append((seen_field, "int8", seen[:, column]))
    flagged = [(pid, f) for pid, f in zip(participation_ids, worker_flags, strict=True) if f]
    table = WorkerQCStats._meta.db_table
    selected = ", ".join(
        f"t.{name}" if name in _INTEGER_FIELDS else f"NULLIF(t.{name}, 'NaN')"
        for name in STAT_FIELDS
    )
    updates = ", ".join(
        f"{name} = EXCLUDED.{name}" for name in (*STAT_FIELDS, *SEEN_FIELDS, "flags", "computed_at")
    )
    with transaction.atomic():
        copy_to_temp_table("qc_worker_stats", columns)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (participation_id, {', '.join(STAT_FIELDS)}, "
                f"{', '.join(SEEN_FIELDS)}, flags, computed_at) "
                f"SELECT t.participation_id, {selected}, "
                f"{', '.join(f't.{name}' for name in SEEN_FIELDS)}, "
                f"COALESCE(f.flags, '[]'::jsonb), %s "
                f"FROM qc_worker_stats AS t LEFT JOIN unnest(%s::bigint[], %s::jsonb[]) "
                f"AS f(participation_id, flags) ON f.participation_id = t.participation_id "
                f"ORDER BY t.position "
                f"ON CONFLICT (participation_id) DO UPDATE SET {updates}",
                [
                    now,
                    pg_array([pid for pid, _ in flagged], "int8"),
                    pg_array([json_text(f) for _, f in flagged], "jsonb"),
                ],
            )
