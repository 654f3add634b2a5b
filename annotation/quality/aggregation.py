"""Aggregation: one score per candidate from its kept judgments (or an expert's resolution).

Per candidate and question: the mean of the kept (not excluded) judgments, unless an expert set a
final value for that question in review (`CampaignCandidate.resolution["values"]`), which wins.

- `overall`: the campaign's explicit overall question (`Campaign.overall_question_key`) when it has
  one, else the mean of the per-question means;
- `normalized` = (overall − 1) / 4, in [0, 1];
- `training_class` = overall rounded half up (2.5 → 3, 3.5 → 4; never banker's rounding);
- `rating_range` = the largest (max − min) of the kept ratings over the questions;
- `is_finalised` (the rule export relies on):
      not a control item
  and not dropped by an expert
  and has an overall score
  and (kept_judgments ≥ quota  or  its review item was resolved by an expert).
  `finalised_at` is when it last became finalised (cleared when it stops being finalised).

Results are stored on `CampaignCandidate` so reads are cheap, and a recompute makes them consistent
with the judgments again (only rows whose values change are written).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.utils import timezone
from numpy.typing import NDArray

from annotation.crowd.services.columns import copy_to_temp_table
from annotation.models import Campaign, CampaignCandidate, ReviewState
from annotation.quality.loading import CampaignSlice, campaign_slice_load
from annotation.quality.review_queue import current_review_state, review_items_sync
from annotation.quality.running_store import agreement_push, stored_sums_read
from annotation.quality.statistics import ReferenceSums, overall_scores
from common import webhooks

# The `CampaignCandidate` columns aggregation writes (the API's aggregate rows show the same).
AGGREGATE_FIELDS: tuple[str, ...] = (
    "judgments_total",
    "kept_judgments",
    "means",
    "overall",
    "normalized",
    "training_class",
    "rating_range",
    "is_finalised",
    "finalised_at",
    "review_state",
)


@dataclass
class Aggregates:
    """Per candidate of a slice (NaN: no value)."""

    means: NDArray[np.float64]  # candidates × questions
    overall: NDArray[np.float64]
    normalized: NDArray[np.float64]
    training_class: NDArray[np.float64]
    rating_range: NDArray[np.float64]
    spread: NDArray[np.float64]  # standard deviation of kept ratings, averaged over questions
    judgments_total: NDArray[np.int64]
    kept_judgments: NDArray[np.int64]
    is_finalised: NDArray[np.bool_]
    # candidates × questions: the sum and count of the kept answered ratings (stored as
    # `CampaignCandidate.kept_sums` / `kept_counts` for the after-submission pass)
    kept_sums: NDArray[np.int64]
    kept_counts: NDArray[np.int64]


def round_half_up(value: float) -> int:
    """2.5 → 3 and 3.5 → 4 (Python's round() would give 2 and 4)."""
    return int(math.floor(round(value, 9) + 0.5))


def aggregates_compute(data: CampaignSlice, *, review_state: NDArray[Any]) -> Aggregates:
    """Aggregates of every candidate in `data`; `review_state` is the final review state per
    candidate (finalisation needs to know which were resolved by an expert)."""
    candidates, judgments = data.candidates, data.judgments
    items = len(candidates)
    questions = len(data.question_keys)
    kept = ~judgments.excluded
    values = judgments.values.astype(np.float64)
    means = np.full((items, questions), np.nan)
    rating_range = np.full(items, np.nan)
    spread_sum = np.zeros(items)
    spread_count = np.zeros(items)
    kept_sums = np.zeros((items, questions), dtype=np.int64)
    kept_counts = np.zeros((items, questions), dtype=np.int64)
    for question in range(questions):
        value = values[:, question]
        counted = kept & (value > 0)
        item = judgments.item[counted]
        count = np.bincount(item, minlength=items).astype(np.float64)
        total = np.bincount(item, weights=value[counted], minlength=items)
        squares = np.bincount(item, weights=value[counted] ** 2, minlength=items)
        present = count > 0
        kept_sums[:, question] = np.rint(total).astype(np.int64)
        kept_counts[:, question] = count.astype(np.int64)
        means[present, question] = total[present] / count[present]
        variance = np.zeros(items)
        variance[present] = np.maximum(
            squares[present] / count[present] - means[present, question] ** 2, 0.0
        )
        spread_sum[present] += np.sqrt(variance[present])
        spread_count[present] += 1
        high = np.zeros(items)
        low = np.full(items, 99.0)
        if item.size:
            np.maximum.at(high, item, value[counted])
            np.minimum.at(low, item, value[counted])
        question_range = np.where(present, high - low, np.nan)
        rating_range = np.fmax(rating_range, question_range)
    for position, resolution in data.resolutions.items():
        for question, key in enumerate(data.question_keys):
            if key in resolution:
                means[position, question] = resolution[key]

    overall = overall_scores(
        means, question_keys=data.question_keys, overall_key=data.campaign.overall_question_key
    )
    normalized = np.clip((overall - 1.0) / 4.0, 0.0, 1.0)
    training_class = np.floor(overall + 0.5)

    judgments_total = np.bincount(judgments.item, minlength=items).astype(np.int64)
    kept_judgments = np.bincount(judgments.item[kept], minlength=items).astype(np.int64)
    is_finalised = finalised(data, overall, kept_judgments, review_state=review_state)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.where(spread_count > 0, spread_sum / np.maximum(spread_count, 1), np.nan)
    return Aggregates(
        means=means,
        overall=overall,
        normalized=normalized,
        training_class=training_class,
        rating_range=rating_range,
        spread=spread,
        judgments_total=judgments_total,
        kept_judgments=kept_judgments,
        is_finalised=is_finalised,
        kept_sums=kept_sums,
        kept_counts=kept_counts,
    )


def finalised(
    data: CampaignSlice,
    overall: NDArray[np.float64],
    kept_judgments: NDArray[np.int64],
    *,
    review_state: NDArray[Any],
) -> NDArray[np.bool_]:
    """`is_finalised` per candidate (see the module docstring): the one aggregate that depends
    on the review state."""
    resolved = np.asarray(review_state) == ReviewState.RESOLVED
    return (
        ~data.candidates.is_control
        & ~data.dropped
        & ~np.isnan(overall)
        & ((kept_judgments >= data.candidates.quota) | resolved)
    )


@dataclass(frozen=True)
class Stored:
    """What a store wrote: how many candidate rows changed, and the ids of those that became
    finalised in this write (not those that already were)."""

    changed: int
    finalised_ids: list[int]


def aggregates_store(
    data: CampaignSlice, aggregates: Aggregates, *, review_state: NDArray[Any]
) -> Stored:
    """Write aggregates and review state to the candidates of `data`."""
    if len(data.candidates) == 0:
        return Stored(0, [])
    now = timezone.now()
    return _aggregates_update(data, aggregates, review_state, now)


# Above this many candidates the aggregates' temporary table is not analysed (see
# `_aggregates_update`).
TEMP_ANALYZE_MAX_ROWS = 20_000

REVIEW_STATE_CODES = {
    ReviewState.NONE.value: 0,
    ReviewState.OPEN.value: 1,
    ReviewState.CLAIMED.value: 2,
    ReviewState.RESOLVED.value: 3,
}


def _aggregates_update(
    data: CampaignSlice, aggregates: Aggregates, review_state: NDArray[Any], now: Any
) -> Stored:
    """One binary COPY into a temporary table, then one UPDATE ... FROM it that writes only the
    rows whose values change. None of the columns written is indexed, so PostgreSQL can update
    in place (HOT) where the page has room (the table's fillfactor leaves some).

    The `means` JSON is built once per distinct row of means, not once per candidate: the
    distinct rows (a few thousand: means of a handful of ratings on a 1-5 scale) go into a
    second temporary table with the code each candidate points at. Building 333,333 JSON
    objects in the UPDATE cost about 0.6 s of a cold run's 2.1 s; the same expression over
    the distinct rows gives the same values. (`OFFSET 0` keeps PostgreSQL from pulling the
    subquery up into the join, which would build the JSON per joined row again.)

    The UPDATE returns the ids of the rows it finalised: a row that becomes finalised gets
    `finalised_at = now` (this call's timestamp) and a row that already was keeps its older one,
    so `finalised_at = now` after the write singles out exactly the newly finalised rows
    (PostgreSQL before 18 has no OLD in RETURNING)."""
    table = CampaignCandidate._meta.db_table
    keys = data.question_keys
    _aggregates_stage(data, aggregates, review_state)
    pairs = ", ".join(f"%s::text, NULLIF(m{index}, 'NaN')" for index in range(len(keys)))
    means_sql = f"jsonb_strip_nulls(jsonb_build_object({pairs}))" if keys else "'{}'::jsonb"
    # No sums on a candidate without judgments (as before any aggregation): nothing to write.
    sums_sql, counts_sql = (
        "(CASE WHEN t.total = 0 THEN NULL ELSE ARRAY["
        + ", ".join(f"t.{prefix}{index}" for index in range(len(keys)))
        + "]::integer[] END)"
        for prefix in ("s", "n")
    )
    review_sql = (
        "(CASE t.review WHEN 1 THEN 'open' WHEN 2 THEN 'claimed' WHEN 3 THEN 'resolved' "
        "ELSE '' END)"
    )
    sql = f"""
        WITH written AS (
        UPDATE {table} AS cc SET
            judgments_total = t.total,
            kept_judgments = t.kept,
            means = m.means,
            overall = NULLIF(t.overall, 'NaN'),
            normalized = NULLIF(t.normalized, 'NaN'),
            training_class = NULLIF(t.training_class, -1),
            rating_range = NULLIF(t.rating_range, -1),
            is_finalised = t.finalised,
            finalised_at = CASE WHEN NOT t.finalised THEN NULL
                                WHEN cc.is_finalised THEN cc.finalised_at ELSE %s END,
            review_state = {review_sql},
            kept_sums = {sums_sql},
            kept_counts = {counts_sql}
        FROM qc_aggregates AS t
        JOIN (SELECT code, {means_sql} AS means FROM qc_means OFFSET 0) AS m
            ON m.code = t.means_code
        WHERE cc.id = t.id AND (
            cc.judgments_total IS DISTINCT FROM t.total
            OR cc.kept_judgments IS DISTINCT FROM t.kept
            OR cc.overall IS DISTINCT FROM NULLIF(t.overall, 'NaN')
            OR cc.normalized IS DISTINCT FROM NULLIF(t.normalized, 'NaN')
            OR cc.training_class IS DISTINCT FROM NULLIF(t.training_class, -1)
            OR cc.rating_range IS DISTINCT FROM NULLIF(t.rating_range, -1)
            OR cc.is_finalised IS DISTINCT FROM t.finalised
            OR cc.review_state IS DISTINCT FROM {review_sql}
            OR cc.means IS DISTINCT FROM m.means
            OR cc.kept_sums IS DISTINCT FROM {sums_sql}
            OR cc.kept_counts IS DISTINCT FROM {counts_sql}
        )
        RETURNING cc.id, cc.finalised_at
        )
        SELECT count(*), coalesce(array_agg(id ORDER BY id) FILTER (WHERE finalised_at = %s), '{{}}')
        FROM written
    """
    params: list[Any] = [now, *keys, now]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL work_mem = '64MB'")
        cursor.execute(sql, params)
        changed, finalised = cursor.fetchone()
    return Stored(int(changed), [int(value) for value in finalised])


def _aggregates_stage(
    data: CampaignSlice, aggregates: Aggregates, review_state: NDArray[Any]
) -> None:
    """The temporary tables `_aggregates_update` writes from: `qc_aggregates` (a row per
    candidate, its means as a code) and `qc_means` (the distinct rows of means, by code)."""
    keys = data.question_keys
    states = np.asarray(review_state)
    codes = np.zeros(len(states), dtype=np.int16)
    for state, code in REVIEW_STATE_CODES.items():
        if code:
            codes[states == state] = code
    columns: list[tuple[str, Any, Any]] = [
        ("id", "int8", data.candidates.ids),
        ("total", "int4", aggregates.judgments_total),
        ("kept", "int4", aggregates.kept_judgments),
        ("overall", "float8", aggregates.overall),
        ("normalized", "float8", aggregates.normalized),
        ("training_class", "int2", np.nan_to_num(aggregates.training_class, nan=-1)),
        ("rating_range", "int2", np.nan_to_num(aggregates.rating_range, nan=-1)),
        ("finalised", "bool", aggregates.is_finalised),
        ("review", "int2", codes),
    ]
    for index in range(len(keys)):
        columns.append((f"s{index}", "int4", aggregates.kept_sums[:, index]))
        columns.append((f"n{index}", "int4", aggregates.kept_counts[:, index]))
    distinct_means, means_code = _distinct_rows(aggregates.means)
    columns.append(("means_code", "int4", means_code))
    # A pass's few rows need the ANALYZE (sized from its one page, the table would look like
    # ~150 rows and the join could scan the whole campaign); a whole campaign's are sized well
    # enough from their pages, and its ANALYZE cost about 0.09 s.
    copy_to_temp_table("qc_aggregates", columns, analyze=len(columns[0][2]) < TEMP_ANALYZE_MAX_ROWS)
    means_columns: list[tuple[str, Any, Any]] = [
        ("code", "int4", np.arange(len(distinct_means), dtype=np.int32))
    ]
    means_columns += [(f"m{i}", "float8", distinct_means[:, i]) for i in range(len(keys))]
    copy_to_temp_table("qc_means", means_columns)


def _distinct_rows(values: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.int32]]:
    """The distinct rows of `values` (candidates × questions) and, per row, the index of its
    distinct row. Rows are compared by their bits (NaN too): each column's values become codes
    (a 1-D `np.unique`), the codes one number per row, and those numbers are made distinct
    (`np.unique(axis=0)` took 0.75 s at 333,333 rows, this about 0.06 s)."""
    rows, width = values.shape
    code = np.zeros(rows, dtype=np.int64)
    span = 1
    for column in range(width):
        bits = np.ascontiguousarray(values[:, column]).view(np.int64)
        column_values = np.unique(bits)
        if span * len(column_values) >= 2**62:  # compress before the number could overflow
            _, code = np.unique(code, return_inverse=True)
            code = code.reshape(-1).astype(np.int64)
            span = int(code.max()) + 1
        code = code * len(column_values) + np.searchsorted(column_values, bits)
        span *= len(column_values)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return values[first], inverse.reshape(-1).astype(np.int32)


def stale_positions(data: CampaignSlice) -> NDArray[np.int64]:
    """Positions of the candidates of `data` whose judgments changed since their aggregates were
    stored: the judgments read (all, kept) differ from the counts the last aggregation wrote.

    Only aggregation writes those counts (a submission does not), so a candidate that gained a
    judgment, or had one excluded, re-included or erased, differs until it is aggregated again,
    whatever happened in between (a failed pass, a broker outage); the sweep's
    `stale_aggregate_candidates` asks the same question of the whole campaign in SQL."""
    items = len(data.candidates)
    judgments = data.judgments
    total = np.bincount(judgments.item, minlength=items)
    kept = np.bincount(judgments.item[~judgments.excluded], minlength=items)
    return np.flatnonzero((total != data.stored_total) | (kept != data.stored_kept)).astype(
        np.int64
    )


def aggregation_recompute(
    *, campaign: Campaign, candidate_ids: Iterable[int] | None = None, detect_review: bool = True
) -> int:
    """Recompute the aggregates of the campaign's candidates (all, or `candidate_ids`), and by
    default put candidates that now disagree too much into the review queue. Returns how many
    candidate rows changed."""
    data = campaign_slice_load(campaign=campaign, candidate_ids=candidate_ids)
    with transaction.atomic():
        return aggregation_apply(data, detect_review=detect_review)


def aggregation_apply(
    data: CampaignSlice,
    *,
    detect_review: bool,
    timings: dict[str, float] | None = None,
    push: bool = True,
) -> int:
    """Aggregate a loaded slice, sync its review items, store; used by full QC runs too.
    `timings` (optional) receives the seconds of each step. With `push` (in a transaction) the
    candidates' rows are locked first and the workers' running agreement moments follow their
    stored sums (`running_store.agreement_push`); a full run, which writes every worker's
    state against the sums it stores, does without."""
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        if timings is not None:
            timings[name] = round(time.perf_counter() - clock, 3)
        clock = time.perf_counter()

    review_state = current_review_state(data)
    aggregates = aggregates_compute(data, review_state=review_state)
    lap("aggregate")
    if detect_review:
        review_state = review_items_sync(
            data=data, rating_range=aggregates.rating_range, spread=aggregates.spread
        )
        # Only finalisation depends on the review state; the other aggregates stand.
        aggregates.is_finalised = finalised(
            data, aggregates.overall, aggregates.kept_judgments, review_state=review_state
        )
        lap("review_queue")
    if push:
        old = stored_sums_read(
            campaign=data.campaign,
            candidate_ids=data.candidates.ids,
            questions=len(data.question_keys),
            lock="NO KEY UPDATE",
        )
        new = ReferenceSums(
            total=aggregates.kept_sums.astype(np.float64),
            count=aggregates.kept_counts.astype(np.float64),
        )
        agreement_push(data, old=old, new=new)
        lap("push_running_agreement")
    stored = aggregates_store(data, aggregates, review_state=review_state)
    lap("store_aggregates")
    if stored.finalised_ids and webhooks.listened("candidate.finalised", data.campaign.pk):
        _emit_finalised(data, aggregates, stored.finalised_ids)
        lap("webhooks")
    return stored.changed


def _emit_finalised(data: CampaignSlice, aggregates: Aggregates, finalised_ids: list[int]) -> None:
    """One `candidate.finalised` event per newly finalised candidate, in the caller's transaction
    (a rolled-back aggregation sends nothing)."""
    position = {int(item): index for index, item in enumerate(data.candidates.ids.tolist())}
    candidate_ids = dict(
        CampaignCandidate.objects.filter(pk__in=finalised_ids).values_list("pk", "candidate_id")
    )
    webhooks.emit_many(
        "candidate.finalised",
        [
            {
                "campaign_candidate_id": item,
                "candidate_id": candidate_ids.get(item),
                "overall": float(aggregates.overall[position[item]]),
                "training_class": int(aggregates.training_class[position[item]]),
            }
            for item in finalised_ids
        ],
        campaign_id=data.campaign.pk,
    )
