"""Per-worker quality statistics, on columns (no database access here).

Input is a `JudgmentColumns` table (one row per judgment, values as a judgments × questions matrix
of 1..5 with 0 for "not answered"), a `CandidateColumns` table and per-clip durations. Output is a
`WorkerStatistics` table (one row per participation) that the rules (`annotation.quality.rules`)
read. Everything is vectorised with NumPy so a campaign of a million judgments takes about a
second; `annotation.quality.loading` reads the columns and `annotation.quality.evaluation` stores
the results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from numpy.typing import NDArray

# Plain-words explanation of every statistic, shown beside the numbers on the dashboard.
STATISTIC_EXPLANATIONS: dict[str, str] = {
    "judgments": "How many candidates this worker rated (control items not counted).",
    "median_seconds_per_candidate": "Typical time the server measured per candidate: half of "
    "this worker's candidates took less, half took more.",
    "speed_vs_campaign": "This worker's typical time divided by the typical time of everyone in "
    "the campaign. 1.0 is average; 0.2 means five times faster than usual.",
    "speed_vs_clip_length": "Typical time spent on a clip divided by the clip's length. Below "
    "1.0 the worker cannot have watched the whole clip.",
    "uniform_share": "Share of this worker's clips where every rating of every candidate was "
    "the same number (clips with at least three ratings).",
    "rating_variance": "How spread out this worker's ratings are (variance on the 1-5 scale). "
    "Near 0 means almost always the same number.",
    "control_accuracy": "Share of the hidden control items (a reference shown as a candidate, a "
    "caption of another clip, a word-shuffled caption) this worker rated as expected.",
    "agreement": "Correlation between this worker's ratings and the average of the other "
    "workers' ratings of the same candidates (1 = same ordering, 0 = unrelated).",
    "retest_kappa": "How well this worker reproduced their own ratings when a clip they had "
    "already rated came back later, unannounced (quadratic-weighted kappa, mean over the "
    "questions): 1 = the same ratings again, 0 = no better than chance.",
}


# ----------------------------------------------------------------------------------------------
# Columns
# ----------------------------------------------------------------------------------------------


@dataclass
class CandidateColumns:
    """One row per campaign candidate; `expected_low/high` are 0 where nothing is expected."""

    ids: NDArray[np.int64]
    clip: NDArray[np.int64]  # index into the clip table
    quota: NDArray[np.int64]
    is_control: NDArray[np.bool_]
    expected_low: NDArray[np.int8]  # candidates × questions
    expected_high: NDArray[np.int8]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class JudgmentColumns:
    """One row per judgment. `values` is judgments × questions, 1..5, 0 where not answered."""

    ids: NDArray[np.int64]
    item: NDArray[np.int64]  # index into CandidateColumns
    worker: NDArray[np.int64]  # index into the worker table
    server_ms: NDArray[np.int64]  # -1: not measured (imported)
    excluded: NDArray[np.bool_]
    imported: NDArray[np.bool_]
    values: NDArray[np.int8]

    def __len__(self) -> int:
        return len(self.ids)


class StatisticsRow(TypedDict):
    """One worker's stored statistics (`WorkerQCStats` columns), rounded; None: no value."""

    judgments: int
    median_seconds_per_candidate: float | None
    speed_vs_campaign: float | None
    speed_vs_clip_length: float | None
    uniform_share: float | None
    rating_variance: float | None
    control_items: int
    control_accuracy: float | None
    agreement: float | None


@dataclass
class WorkerStatistics:
    """Per worker (index into the worker table); NaN where a statistic cannot be computed."""

    judgments: NDArray[np.int64]
    timed_judgments: NDArray[np.int64]
    clips: NDArray[np.int64]  # clips the worker rated (crowd judgments): the evidence of a pattern
    timed_clips: NDArray[np.int64]  # of which timed by the server
    median_seconds_per_candidate: NDArray[np.float64]
    speed_vs_campaign: NDArray[np.float64]
    speed_vs_clip_length: NDArray[np.float64]
    uniform_assignments: NDArray[np.int64]
    uniform_share: NDArray[np.float64]
    ratings: NDArray[np.int64]
    rating_variance: NDArray[np.float64]
    control_items: NDArray[np.int64]
    control_passed: NDArray[np.int64]
    control_accuracy: NDArray[np.float64]
    agreement_pairs: NDArray[np.int64]
    agreement: NDArray[np.float64]
    campaign_median_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Test-retest repeat pairs and mean kappa per worker; None when the rule is off (not loaded).
    retest_pairs: NDArray[np.int64] | None = None
    retest_kappa: NDArray[np.float64] | None = None

    def row(self, index: int) -> StatisticsRow:
        def number(value: float) -> float | None:
            return None if math.isnan(value) else round(float(value), 4)

        return {
            "judgments": int(self.judgments[index]),
            "median_seconds_per_candidate": number(self.median_seconds_per_candidate[index]),
            "speed_vs_campaign": number(self.speed_vs_campaign[index]),
            "speed_vs_clip_length": number(self.speed_vs_clip_length[index]),
            "uniform_share": number(self.uniform_share[index]),
            "rating_variance": number(self.rating_variance[index]),
            "control_items": int(self.control_items[index]),
            "control_accuracy": number(self.control_accuracy[index]),
            "agreement": number(self.agreement[index]),
        }


def group_median(
    group: NDArray[np.int64], values: NDArray[np.float64], groups: int
) -> NDArray[np.float64]:
    """Median of `values` per group index (NaN for empty groups)."""
    result = np.full(groups, np.nan)
    if values.size == 0:
        return result
    # Values in ascending order within each group: sort by value, then a stable sort by group
    # (np.lexsort of the two keys took about 1.4 times as long at 1M rows).
    by_value = np.argsort(values)
    order = by_value[np.argsort(group[by_value], kind="stable")]
    sorted_values = values[order]
    counts = np.bincount(group, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    present = counts > 0
    low = starts[present] + (counts[present] - 1) // 2
    high = starts[present] + counts[present] // 2
    result[present] = (sorted_values[low] + sorted_values[high]) / 2.0
    return result


def _divide(numerator: NDArray[Any], denominator: NDArray[Any]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore", invalid="ignore"):
        result = np.asarray(numerator, dtype=np.float64) / np.asarray(denominator, dtype=np.float64)
    result[~np.isfinite(result)] = np.nan
    return result


def worker_statistics(
    judgments: JudgmentColumns,
    candidates: CandidateColumns,
    clip_seconds: NDArray[np.float64],
    *,
    workers: int,
    agreement_reference: NDArray[np.bool_],
    campaign_median_seconds: float | None = None,
    agreement_sums: ReferenceSums | None = None,
) -> WorkerStatistics:
    """Every per-worker statistic in one vectorised pass.

    `agreement_reference` marks the judgments that make up "the other workers" for the
    leave-one-out mean (kept judgments of workers who are not excluded). When
    `campaign_median_seconds` is None it is the median over every timed crowd judgment here.
    `agreement_sums`: the reference sums read from the database, for a slice that holds only
    the judgments of the workers to measure (see `leave_one_out_agreement`).
    """
    worker = judgments.worker
    values = judgments.values.astype(np.int64)
    is_control = candidates.is_control[judgments.item]
    timing = _timing(judgments, workers=workers, campaign_median_seconds=campaign_median_seconds)
    clips = _clip_patterns(judgments, candidates, clip_seconds, values, timing, workers=workers)
    rating_count, variance = _rating_spread(worker, values, workers=workers)
    control_items, control_passed, control_accuracy = _control_results(
        judgments, candidates, values, workers=workers
    )
    pairs, agreement = leave_one_out_agreement(
        judgments, candidates, workers=workers, reference=agreement_reference, sums=agreement_sums
    )
    return WorkerStatistics(
        judgments=np.bincount(worker[~is_control], minlength=workers),
        timed_judgments=timing.count,
        clips=clips.rated,
        timed_clips=clips.timed,
        median_seconds_per_candidate=timing.median_seconds,
        speed_vs_campaign=timing.speed_vs_campaign,
        speed_vs_clip_length=clips.speed_vs_clip_length,
        uniform_assignments=clips.uniform_assignments,
        uniform_share=clips.uniform_share,
        ratings=rating_count.astype(np.int64),
        rating_variance=variance,
        control_items=control_items,
        control_passed=control_passed,
        control_accuracy=control_accuracy,
        agreement_pairs=pairs,
        agreement=agreement,
        campaign_median_seconds=timing.campaign_median_seconds,
    )


@dataclass
class _Timing:
    """Crowd judgments with a server-side measurement, and the per-worker times."""

    timed: NDArray[np.bool_]  # per judgment
    seconds: NDArray[np.float64]  # per timed judgment
    count: NDArray[np.int64]
    median_seconds: NDArray[np.float64]
    speed_vs_campaign: NDArray[np.float64]
    campaign_median_seconds: float | None


def _timing(
    judgments: JudgmentColumns, *, workers: int, campaign_median_seconds: float | None
) -> _Timing:
    timed = ~judgments.imported & (judgments.server_ms >= 0)
    seconds = judgments.server_ms[timed] / 1000.0
    timed_worker = judgments.worker[timed]
    if campaign_median_seconds is None and seconds.size:
        campaign_median_seconds = float(np.median(seconds))
    median_seconds = group_median(timed_worker, seconds, workers)
    speed_vs_campaign = (
        median_seconds / campaign_median_seconds
        if campaign_median_seconds
        else np.full(workers, np.nan)
    )
    return _Timing(
        timed=timed,
        seconds=seconds,
        count=np.bincount(timed_worker, minlength=workers),
        median_seconds=median_seconds,
        speed_vs_campaign=np.asarray(speed_vs_campaign, dtype=np.float64),
        campaign_median_seconds=campaign_median_seconds,
    )


@dataclass
class _ClipPatterns:
    """Per worker, from the (worker, clip) groups: time spent on a clip and uniform clips."""

    rated: NDArray[np.int64]
    timed: NDArray[np.int64]
    speed_vs_clip_length: NDArray[np.float64]
    uniform_assignments: NDArray[np.int64]
    uniform_share: NDArray[np.float64]


def _clip_patterns(
    judgments: JudgmentColumns,
    candidates: CandidateColumns,
    clip_seconds: NDArray[np.float64],
    values: NDArray[np.int64],
    timing: _Timing,
    *,
    workers: int,
) -> _ClipPatterns:
    clip = candidates.clip[judgments.item]
    clips = int(clip_seconds.size) or 1
    pair_key = judgments.worker * clips + clip
    pair_keys, pair = np.unique(pair_key, return_inverse=True)
    pair_worker = pair_keys // clips
    pair_clip = pair_keys % clips
    timed = timing.timed
    # Summed in milliseconds (integers: exact in any order), then seconds.
    pair_time = (
        np.bincount(pair[timed], weights=judgments.server_ms[timed], minlength=len(pair_keys))
        / 1000.0
    )
    pair_timed = np.bincount(pair[timed], minlength=len(pair_keys)) > 0
    clip_ratio = np.asarray(
        _divide(pair_time, clip_seconds[pair_clip]) if clip_seconds.size else pair_time,
        dtype=np.float64,
    )
    # A clip without a length (a still image has none) has no ratio: left out of the median.
    with_length = pair_timed & ~np.isnan(clip_ratio)
    speed_vs_clip = group_median(pair_worker[with_length], clip_ratio[with_length], workers)

    answered = values > 0
    ratings_per_row = answered.sum(axis=1)
    row_low = np.where(answered, values, 99).min(axis=1) if values.shape[1] else np.zeros(0)
    row_high = np.where(answered, values, 0).max(axis=1) if values.shape[1] else np.zeros(0)
    pair_ratings = np.bincount(pair, weights=ratings_per_row, minlength=len(pair_keys))
    pair_low = np.full(len(pair_keys), 99)
    pair_high = np.zeros(len(pair_keys), dtype=np.int64)
    if len(pair):
        np.minimum.at(pair_low, pair, row_low)
        np.maximum.at(pair_high, pair, row_high)
    crowd_pair = crowd_pairs(pair, ~judgments.imported, len(pair_keys))
    countable = (pair_ratings >= 3) & crowd_pair
    uniform_pair = countable & (pair_low == pair_high)
    uniform_assignments = np.bincount(pair_worker[countable], minlength=workers)
    return _ClipPatterns(
        rated=np.bincount(pair_worker[crowd_pair], minlength=workers),
        timed=np.bincount(pair_worker[pair_timed], minlength=workers),
        speed_vs_clip_length=speed_vs_clip,
        uniform_assignments=uniform_assignments,
        uniform_share=_divide(
            np.bincount(pair_worker[uniform_pair], minlength=workers), uniform_assignments
        ),
    )


def _rating_spread(
    worker: NDArray[np.int64], values: NDArray[np.int64], *, workers: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """How many ratings each worker gave, and their variance."""
    ratings_per_row = (values > 0).sum(axis=1)
    rating_count = np.bincount(worker, weights=ratings_per_row, minlength=workers)
    rating_sum = np.bincount(worker, weights=values.sum(axis=1), minlength=workers)
    rating_squares = np.bincount(worker, weights=(values**2).sum(axis=1), minlength=workers)
    mean = _divide(rating_sum, rating_count)
    variance = _divide(rating_squares, rating_count) - mean**2
    # Weighted bincounts are float64 (the stubs say int); asarray only states it.
    count = np.asarray(rating_count, dtype=np.float64)
    return count, np.where(variance < 0, 0.0, variance)


def _control_results(
    judgments: JudgmentColumns,
    candidates: CandidateColumns,
    values: NDArray[np.int64],
    *,
    workers: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Control items rated, passed and the share passed, per worker. A control judgment passes
    when every expected question is inside its range."""
    item = judgments.item
    low = candidates.expected_low[item].astype(np.int64)
    high = candidates.expected_high[item].astype(np.int64)
    checked = (low > 0) & (values > 0)
    inside = (values >= low) & (values <= high)
    control_rows = candidates.is_control[item] & checked.any(axis=1)
    passed = control_rows & ~(checked & ~inside).any(axis=1)
    items = np.bincount(judgments.worker[control_rows], minlength=workers)
    passed_count = np.bincount(judgments.worker[passed], minlength=workers)
    return items, passed_count, _divide(passed_count, items)


def crowd_pairs(pair: NDArray[np.int64], crowd: NDArray[np.bool_], pairs: int) -> NDArray[np.bool_]:
    """True for (worker, clip) groups made of crowd judgments (imported rater slots are not
    assignments)."""
    return np.bincount(pair[crowd], minlength=pairs) > 0


@dataclass
class ReferenceSums:
    """Per candidate (row, index into `CandidateColumns`) and question: the sum and count of the
    answered ratings of the reference judgments ("the other raters" plus the judgment itself).
    Integers (ratings are 1..5), so sums read from the database give exactly the figures a
    full read computes."""

    total: NDArray[np.float64]  # candidates × questions
    count: NDArray[np.float64]


def reference_sums(
    judgments: JudgmentColumns, *, items: int, reference: NDArray[np.bool_]
) -> ReferenceSums:
    """The `ReferenceSums` of the `reference` judgments of a slice that holds every judgment on
    its candidates."""
    values = judgments.values.astype(np.float64)
    questions = values.shape[1]
    total = np.zeros((items, questions))
    count = np.zeros((items, questions))
    for question in range(questions):
        value = values[:, question]
        counted = (value > 0) & reference
        total[:, question] = np.bincount(
            judgments.item[counted], weights=value[counted], minlength=items
        )
        count[:, question] = np.bincount(judgments.item[counted], minlength=items)
    return ReferenceSums(total=total, count=count)


def reference_sums_without(
    sums: ReferenceSums, judgments: JudgmentColumns, *, leaving: NDArray[np.bool_]
) -> ReferenceSums:
    """`sums` less the judgments of the slice marked `leaving` (which must be in `sums`)."""
    removed = reference_sums(judgments, items=sums.total.shape[0], reference=leaving)
    return ReferenceSums(total=sums.total - removed.total, count=sums.count - removed.count)


def leave_one_out_agreement(
    judgments: JudgmentColumns,
    candidates: CandidateColumns,
    *,
    workers: int,
    reference: NDArray[np.bool_],
    sums: ReferenceSums | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Per worker: how many (judgment, question) pairs had other raters, and the Pearson
    correlation of the worker's ratings with the mean of the other raters' ratings.

    The "other raters" of a judgment are the `reference` judgments on the same candidate and
    question minus the judgment itself. Control candidates are left out. Without `sums` the
    slice must hold every judgment on its candidates (the sums are taken from it); with `sums`
    (read from the database: `annotation.quality.candidate_sums`) it needs only the judgments
    of the workers to measure, and `reference` says which of those are in `sums`."""
    if sums is None:
        sums = reference_sums(judgments, items=len(candidates), reference=reference)
    moments = agreement_moments(
        judgments, candidates, workers=workers, reference=reference, sums=sums
    )
    return agreement_from_moments(moments)


# Per number of other raters d: Σ numerator, Σ x · numerator, Σ numerator², where the mean of
# the others is numerator / d.
OTHERS_WIDTH = 3


@dataclass
class AgreementMoments:
    """The leave-one-out correlation's moments per worker, as exact integers: `base` holds n, Σx,
    Σx² (workers × 3) and `by_others[w, d - 1]` the `OTHERS_WIDTH` numerator sums of the pairs
    with d other raters. Integers add and subtract exactly, so moments kept running (a
    worker's old contribution out, the new one in) end where a full read's do."""

    base: NDArray[np.int64]
    by_others: NDArray[np.int64]  # workers × D × OTHERS_WIDTH


def agreement_moments(
    judgments: JudgmentColumns,
    candidates: CandidateColumns,
    *,
    workers: int,
    reference: NDArray[np.bool_],
    sums: ReferenceSums,
) -> AgreementMoments:
    """The moments of every judgment of the slice against `sums` (rows: its candidates), where
    `reference` marks the judgments counted in `sums` (taken out of their own mean)."""
    values = judgments.values.astype(np.int64)
    usable = ~candidates.is_control[judgments.item]
    base = np.zeros((workers, 3), dtype=np.int64)
    parts: list[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]]
    parts = []
    for question in range(values.shape[1]):
        value = values[:, question]
        answered = (value > 0) & usable
        own = (answered & reference).astype(np.int64)
        total = np.rint(sums.total[judgments.item, question]).astype(np.int64)
        others = np.rint(sums.count[judgments.item, question]).astype(np.int64) - own
        valid = answered & (others >= 1)
        if not valid.any():
            continue
        x, who = value[valid], judgments.worker[valid]
        base[:, 0] += np.bincount(who, minlength=workers)
        base[:, 1] += _integer_bincount(who, x, workers)
        base[:, 2] += _integer_bincount(who, x * x, workers)
        parts.append((who, others[valid], x, total[valid] - x * own[valid]))
    width = max((int(part[1].max()) for part in parts), default=0)
    by_others = np.zeros((workers * max(width, 1), OTHERS_WIDTH), dtype=np.int64)
    for who, others, x, numerator in parts:
        slot = who * max(width, 1) + others - 1
        for column, weight in enumerate((numerator, x * numerator, numerator * numerator)):
            by_others[:, column] += _integer_bincount(slot, weight, len(by_others))
    return AgreementMoments(
        base=base, by_others=by_others.reshape(workers, max(width, 1), OTHERS_WIDTH)[:, :width]
    )


def _integer_bincount(
    index: NDArray[np.int64], weights: NDArray[np.int64], length: int
) -> NDArray[np.int64]:
    """Integer sums per index. bincount adds in float64, exact for integers below 2**53 (these
    are sums of ratings and their products: far below), and is much faster than `np.add.at`."""
    return np.rint(np.bincount(index, weights=weights, minlength=length)).astype(np.int64)


def agreement_from_moments(
    moments: AgreementMoments,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Pairs and correlation per worker from integer moments. The others' sums are added one
    number of raters at a time, in order, so trailing zero columns (a wider table) change
    nothing: equal integers give equal floats."""
    n = moments.base[:, 0].astype(np.float64)
    sx = moments.base[:, 1].astype(np.float64)
    sxx = moments.base[:, 2].astype(np.float64)
    sy = np.zeros(len(n))
    sxy = np.zeros(len(n))
    syy = np.zeros(len(n))
    for index in range(moments.by_others.shape[1]):
        others = float(index + 1)
        column = moments.by_others[:, index].astype(np.float64)
        sy += column[:, 0] / others
        sxy += column[:, 1] / others
        syy += column[:, 2] / (others * others)
    covariance = n * sxy - sx * sy
    spread = (n * sxx - sx * sx) * (n * syy - sy * sy)
    with np.errstate(divide="ignore", invalid="ignore"):
        correlation = covariance / np.sqrt(spread)
    correlation[~np.isfinite(correlation) | (spread <= 1e-9)] = np.nan
    return moments.base[:, 0].copy(), np.clip(correlation, -1.0, 1.0)


def overall_scores(
    scores: NDArray[np.float64], *, question_keys: list[str], overall_key: str
) -> NDArray[np.float64]:
    """The overall score of each row of `scores` (rows × questions, NaN where not rated), rounded
    to 9 places: the overall question's where the campaign names one it asks, else the mean of
    the questions rated (NaN where none is). One rule for the crowd mean and the calibrated
    score alike."""
    if overall_key and overall_key in question_keys:
        overall = scores[:, question_keys.index(overall_key)].copy()
    elif question_keys:
        with np.errstate(invalid="ignore"):
            answered = ~np.isnan(scores)
            overall = np.where(
                answered.any(axis=1),
                np.nansum(scores, axis=1) / np.maximum(answered.sum(axis=1), 1),
                np.nan,
            )
    else:
        overall = np.full(scores.shape[0], np.nan)
    return np.round(overall, 9)
