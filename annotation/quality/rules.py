"""Quality-control statistics and rules, on columns (no database access here).

Input is a `JudgmentColumns` table (one row per judgment, values as a judgments × questions matrix
of 1..5 with 0 for "not answered"), a `CandidateColumns` table and per-clip durations. Output is a
`WorkerStatistics` table (one row per participation) and, from the rules, a list of flags per
worker. Everything is vectorised with NumPy so a campaign of a million judgments takes about a
second; `annotation.quality.loading` reads the columns and `annotation.quality.evaluation` stores
the results.

Rules are configured per campaign in `Campaign.qc_rules` (a JSON object) and merged over
`DEFAULT_QC_RULES`; see docs/quality.md for the meaning of every number.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

# ----------------------------------------------------------------------------------------------
# Rules and their defaults
# ----------------------------------------------------------------------------------------------

ACTION_EXCLUDE = "exclude"
ACTION_FLAG = "flag"

DEFAULT_QC_RULES: dict[str, dict[str, Any]] = {
    # Much faster than everyone else, or not even long enough to have watched the clip. A pattern
    # rule: it acts only on evidence from several clips (`min_clips`), never on one clip alone.
    "too_fast": {
        "enabled": True,
        "action": ACTION_EXCLUDE,
        "min_judgments": 6,
        "min_clips": 3,
        "max_ratio_to_campaign_median": 0.35,
        "max_ratio_to_clip_length": 0.5,
    },
    # The same value for everything: whole assignments rated identically, or hardly any variance.
    # Both tests need `min_assignments` clips: one clip of six good captions honestly rated 5 on
    # every question is 18 equal ratings, and says nothing about the worker.
    "uniform": {
        "enabled": True,
        "action": ACTION_EXCLUDE,
        "min_assignments": 4,
        "min_ratings": 12,
        "max_uniform_share": 0.75,
        "min_variance": 0.1,
    },
    # Control items rated outside their expected range too often.
    "failed_controls": {
        "enabled": True,
        "action": ACTION_EXCLUDE,
        "min_controls": 3,
        "min_accuracy": 0.6,
    },
    # Ratings that do not go with the other workers' ratings of the same candidates. Flagged (listed
    # for a curator) from `min_judgments` candidates on; acted on (`action`) only with the evidence
    # of `exclude_min_judgments` candidates compared with other raters over `exclude_min_clips`
    # clips: this is what catches a worker who answers at random at human speed in a campaign
    # without control items.
    "low_agreement": {
        "enabled": True,
        "action": ACTION_EXCLUDE,
        "min_judgments": 8,
        "min_correlation": 0.2,
        "exclude_min_judgments": 24,
        "exclude_min_clips": 4,
    },
    # Test-retest (campaigns with `retest_share` > 0): the worker's second ratings of candidates
    # they rated before do not reproduce the first ones. Off by default; acts only once the
    # worker has `min_pairs` repeated candidates (fewer pairs give a noisy kappa).
    "inconsistent_retest": {
        "enabled": False,
        "action": ACTION_FLAG,
        "min_pairs": 10,
        "min_kappa": 0.4,
    },
}

RULE_LABELS: dict[str, str] = {
    "too_fast": "Too fast",
    "uniform": "Uniform ratings",
    "failed_controls": "Failed control items",
    "low_agreement": "Low agreement",
    "inconsistent_retest": "Inconsistent on repeats",
}

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


def qc_rules_merge(configured: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The campaign's rules over the defaults; unknown keys are kept (documented, ignored)."""
    rules = copy.deepcopy(DEFAULT_QC_RULES)
    for name, override in (configured or {}).items():
        if isinstance(override, dict):
            rules.setdefault(name, {}).update(override)
        elif isinstance(override, bool):
            rules.setdefault(name, {})["enabled"] = override
    return rules


def qc_rules_validate(configured: Any) -> list[str]:
    """Problems with a `qc_rules` value (empty list: valid)."""
    problems: list[str] = []
    if not isinstance(configured, dict):
        return ["qc_rules must be a JSON object"]
    for name, override in configured.items():
        if name not in DEFAULT_QC_RULES:
            problems.append(f"unknown rule {name!r}")
            continue
        if isinstance(override, bool):
            continue
        if not isinstance(override, dict):
            problems.append(f"{name}: must be an object or true/false")
            continue
        for key, value in override.items():
            if key not in DEFAULT_QC_RULES[name]:
                problems.append(f"{name}.{key}: unknown setting")
            elif key == "action":
                if value not in (ACTION_EXCLUDE, ACTION_FLAG):
                    problems.append(f"{name}.action: must be 'exclude' or 'flag'")
            elif key == "enabled":
                if not isinstance(value, bool):
                    problems.append(f"{name}.enabled: must be true or false")
            elif not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                problems.append(f"{name}.{key}: must be a non-negative number")
    return problems


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

    def row(self, index: int) -> dict[str, Any]:
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
) -> WorkerStatistics:
    """Every per-worker statistic in one vectorised pass.

    `agreement_reference` marks the judgments that make up "the other workers" for the
    leave-one-out mean (kept judgments of workers who are not excluded). When
    `campaign_median_seconds` is None it is the median over every timed crowd judgment here.
    """
    worker = judgments.worker
    item = judgments.item
    values = judgments.values.astype(np.int64)
    answered = values > 0
    is_control = candidates.is_control[item]
    crowd = ~judgments.imported

    judged = np.bincount(worker[~is_control], minlength=workers)

    # Timing: only crowd judgments with a server-side measurement.
    timed = crowd & (judgments.server_ms >= 0)
    seconds = judgments.server_ms[timed] / 1000.0
    timed_worker = worker[timed]
    if campaign_median_seconds is None and seconds.size:
        campaign_median_seconds = float(np.median(seconds))
    median_seconds = group_median(timed_worker, seconds, workers)
    timed_count = np.bincount(timed_worker, minlength=workers)
    speed_vs_campaign = (
        median_seconds / campaign_median_seconds
        if campaign_median_seconds
        else np.full(workers, np.nan)
    )

    # Per (worker, clip) groups: the time spent on a clip and whether it was rated uniformly.
    clip = candidates.clip[item]
    clips = int(clip_seconds.size) or 1
    pair_key = worker * clips + clip
    pair_keys, pair = np.unique(pair_key, return_inverse=True)
    pair_worker = pair_keys // clips
    pair_clip = pair_keys % clips
    pair_time = np.bincount(pair[timed], weights=seconds, minlength=len(pair_keys))
    pair_timed = np.bincount(pair[timed], minlength=len(pair_keys)) > 0
    clip_ratio = np.asarray(
        _divide(pair_time, clip_seconds[pair_clip]) if clip_seconds.size else pair_time,
        dtype=np.float64,
    )
    # A clip without a length (a still image has none) has no ratio: left out of the median.
    with_length = pair_timed & ~np.isnan(clip_ratio)
    speed_vs_clip = group_median(pair_worker[with_length], clip_ratio[with_length], workers)

    ratings_per_row = answered.sum(axis=1)
    row_low = np.where(answered, values, 99).min(axis=1) if values.shape[1] else np.zeros(0)
    row_high = np.where(answered, values, 0).max(axis=1) if values.shape[1] else np.zeros(0)
    pair_ratings = np.bincount(pair, weights=ratings_per_row, minlength=len(pair_keys))
    pair_low = np.full(len(pair_keys), 99)
    pair_high = np.zeros(len(pair_keys), dtype=np.int64)
    if len(pair):
        np.minimum.at(pair_low, pair, row_low)
        np.maximum.at(pair_high, pair, row_high)
    crowd_pair = crowd_pairs(pair, crowd, len(pair_keys))
    clips_rated = np.bincount(pair_worker[crowd_pair], minlength=workers)
    timed_clips = np.bincount(pair_worker[pair_timed], minlength=workers)
    countable = (pair_ratings >= 3) & crowd_pair
    uniform_pair = countable & (pair_low == pair_high)
    uniform_assignments = np.bincount(pair_worker[countable], minlength=workers)
    uniform_share = _divide(
        np.bincount(pair_worker[uniform_pair], minlength=workers), uniform_assignments
    )

    # Spread of all ratings of a worker.
    rating_count = np.bincount(worker, weights=ratings_per_row, minlength=workers)
    rating_sum = np.bincount(worker, weights=values.sum(axis=1), minlength=workers)
    rating_squares = np.bincount(worker, weights=(values**2).sum(axis=1), minlength=workers)
    mean = _divide(rating_sum, rating_count)
    variance = _divide(rating_squares, rating_count) - mean**2
    variance = np.where(variance < 0, 0.0, variance)  # rounding below zero

    # Controls: a control judgment passes when every expected question is inside its range.
    low = candidates.expected_low[item].astype(np.int64)
    high = candidates.expected_high[item].astype(np.int64)
    checked = (low > 0) & answered
    inside = (values >= low) & (values <= high)
    control_rows = is_control & checked.any(axis=1)
    passed = control_rows & ~(checked & ~inside).any(axis=1)
    control_items = np.bincount(worker[control_rows], minlength=workers)
    control_passed = np.bincount(worker[passed], minlength=workers)
    control_accuracy = _divide(control_passed, control_items)

    pairs, agreement = leave_one_out_agreement(
        judgments, candidates, workers=workers, reference=agreement_reference
    )

    return WorkerStatistics(
        judgments=judged,
        timed_judgments=timed_count,
        clips=clips_rated,
        timed_clips=timed_clips,
        median_seconds_per_candidate=median_seconds,
        speed_vs_campaign=np.asarray(speed_vs_campaign, dtype=np.float64),
        speed_vs_clip_length=speed_vs_clip,
        uniform_assignments=uniform_assignments,
        uniform_share=uniform_share,
        ratings=rating_count.astype(np.int64),
        rating_variance=variance,
        control_items=control_items,
        control_passed=control_passed,
        control_accuracy=control_accuracy,
        agreement_pairs=pairs,
        agreement=agreement,
        campaign_median_seconds=campaign_median_seconds,
    )


def crowd_pairs(pair: NDArray[np.int64], crowd: NDArray[np.bool_], pairs: int) -> NDArray[np.bool_]:
    """True for (worker, clip) groups made of crowd judgments (imported rater slots are not
    assignments)."""
    return np.bincount(pair[crowd], minlength=pairs) > 0


def leave_one_out_agreement(
    judgments: JudgmentColumns,
    candidates: CandidateColumns,
    *,
    workers: int,
    reference: NDArray[np.bool_],
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Per worker: how many (judgment, question) pairs had other raters, and the Pearson
    correlation of the worker's ratings with the mean of the other raters' ratings.

    The "other raters" of a judgment are the `reference` judgments on the same candidate and
    question minus the judgment itself. Control candidates are left out.
    """
    items = len(candidates)
    values = judgments.values.astype(np.float64)
    usable = ~candidates.is_control[judgments.item]
    sums = np.zeros((6, workers))  # n, x, y, xy, xx, yy
    for question in range(values.shape[1]):
        value = values[:, question]
        answered = (value > 0) & usable
        counted = answered & reference
        total = np.bincount(judgments.item[counted], weights=value[counted], minlength=items)
        count = np.bincount(judgments.item[counted], minlength=items).astype(np.float64)
        own = counted.astype(np.float64)
        others = count[judgments.item] - own
        valid = answered & (others >= 1)
        if not valid.any():
            continue
        mean_of_others = (total[judgments.item][valid] - value[valid] * own[valid]) / others[valid]
        x = value[valid]
        who = judgments.worker[valid]
        sums[0] += np.bincount(who, minlength=workers)
        sums[1] += np.bincount(who, weights=x, minlength=workers)
        sums[2] += np.bincount(who, weights=mean_of_others, minlength=workers)
        sums[3] += np.bincount(who, weights=x * mean_of_others, minlength=workers)
        sums[4] += np.bincount(who, weights=x * x, minlength=workers)
        sums[5] += np.bincount(who, weights=mean_of_others * mean_of_others, minlength=workers)
    n, sx, sy, sxy, sxx, syy = (sums[row] for row in range(6))
    covariance = n * sxy - sx * sy
    spread = (n * sxx - sx * sx) * (n * syy - sy * sy)
    with np.errstate(divide="ignore", invalid="ignore"):
        correlation = covariance / np.sqrt(spread)
    correlation[~np.isfinite(correlation) | (spread <= 1e-9)] = np.nan
    return n.astype(np.int64), np.clip(correlation, -1.0, 1.0)


# ----------------------------------------------------------------------------------------------
# Rules
# ----------------------------------------------------------------------------------------------


def _rounded(value: float) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), 3)


def rules_evaluate(
    statistics: WorkerStatistics,
    rules: dict[str, dict[str, Any]],
    *,
    worker_indices: NDArray[np.int64] | list[int],
) -> dict[int, list[dict[str, Any]]]:
    """The flags each worker trips: {worker index: [{"rule", "label", "action", "explanation",
    "numbers"}]}. Workers without flags are absent. The caller decides which workers rules may
    act on (never imported rater slots)."""
    result: dict[int, list[dict[str, Any]]] = {}
    fast = rules.get("too_fast", {})
    uniform = rules.get("uniform", {})
    controls = rules.get("failed_controls", {})
    agreement = rules.get("low_agreement", {})
    retest = rules.get("inconsistent_retest", {})
    campaign_median = statistics.campaign_median_seconds
    for index in np.asarray(worker_indices, dtype=np.int64).tolist():
        flags: list[dict[str, Any]] = []
        if (
            fast.get("enabled")
            and statistics.timed_judgments[index] >= fast["min_judgments"]
            and statistics.timed_clips[index] >= fast.get("min_clips", 0)
        ):
            ratio = statistics.speed_vs_campaign[index]
            clip_ratio = statistics.speed_vs_clip_length[index]
            reasons = []
            if not math.isnan(ratio) and ratio < fast["max_ratio_to_campaign_median"]:
                reasons.append(
                    f"typical {statistics.median_seconds_per_candidate[index]:.1f} s per candidate"
                    f" is {ratio:.2f}× the campaign's {campaign_median or 0:.1f} s "
                    f"(limit {fast['max_ratio_to_campaign_median']}×)"
                )
            if not math.isnan(clip_ratio) and clip_ratio < fast["max_ratio_to_clip_length"]:
                reasons.append(
                    f"typical time on a clip is {clip_ratio:.2f}× the clip's length "
                    f"(limit {fast['max_ratio_to_clip_length']}×)"
                )
            if reasons:
                flags.append(
                    _flag(
                        "too_fast",
                        fast,
                        "; ".join(reasons),
                        {
                            "median_seconds_per_candidate": _rounded(
                                statistics.median_seconds_per_candidate[index]
                            ),
                            "campaign_median_seconds": _rounded(campaign_median or float("nan")),
                            "speed_vs_campaign": _rounded(ratio),
                            "speed_vs_clip_length": _rounded(clip_ratio),
                            "timed_judgments": int(statistics.timed_judgments[index]),
                        },
                    )
                )
        # Both uniformity tests wait for `min_assignments` clips (see DEFAULT_QC_RULES).
        if uniform.get("enabled") and (
            statistics.uniform_assignments[index] >= uniform["min_assignments"]
        ):
            share = statistics.uniform_share[index]
            variance = statistics.rating_variance[index]
            reasons = []
            if not math.isnan(share) and share > uniform["max_uniform_share"]:
                reasons.append(
                    f"{share:.0%} of {statistics.uniform_assignments[index]} clips rated with "
                    f"one single value (limit {uniform['max_uniform_share']:.0%})"
                )
            if (
                statistics.ratings[index] >= uniform["min_ratings"]
                and not math.isnan(variance)
                and variance < uniform["min_variance"]
            ):
                reasons.append(
                    f"variance of {statistics.ratings[index]} ratings is {variance:.3f} "
                    f"(minimum {uniform['min_variance']})"
                )
            if reasons:
                flags.append(
                    _flag(
                        "uniform",
                        uniform,
                        "; ".join(reasons),
                        {
                            "uniform_share": _rounded(share),
                            "assignments": int(statistics.uniform_assignments[index]),
                            "rating_variance": _rounded(variance),
                            "ratings": int(statistics.ratings[index]),
                        },
                    )
                )
        if controls.get("enabled") and statistics.control_items[index] >= controls["min_controls"]:
            accuracy = statistics.control_accuracy[index]
            if not math.isnan(accuracy) and accuracy < controls["min_accuracy"]:
                flags.append(
                    _flag(
                        "failed_controls",
                        controls,
                        f"{statistics.control_passed[index]} of {statistics.control_items[index]}"
                        f" control items rated as expected ({accuracy:.0%}; minimum "
                        f"{controls['min_accuracy']:.0%})",
                        {
                            "control_items": int(statistics.control_items[index]),
                            "control_passed": int(statistics.control_passed[index]),
                            "control_accuracy": _rounded(accuracy),
                        },
                    )
                )
        if agreement.get("enabled") and statistics.judgments[index] >= agreement["min_judgments"]:
            correlation = statistics.agreement[index]
            if not math.isnan(correlation) and correlation < agreement["min_correlation"]:
                enough = agreement_evidence_enough(statistics, agreement, index)
                flags.append(
                    _flag(
                        "low_agreement",
                        agreement,
                        f"correlation with the other workers' mean is {correlation:.2f} over "
                        f"{statistics.agreement_pairs[index]} ratings of "
                        f"{statistics.judgments[index]} candidates in "
                        f"{statistics.clips[index]} clips (minimum "
                        f"{agreement['min_correlation']})"
                        + ("" if enough else "; too little evidence yet to act on"),
                        {
                            "agreement": _rounded(correlation),
                            "pairs": int(statistics.agreement_pairs[index]),
                            "judgments": int(statistics.judgments[index]),
                            "clips": int(statistics.clips[index]),
                        },
                        action=None if enough else ACTION_FLAG,
                    )
                )
        if (
            retest.get("enabled")
            and statistics.retest_pairs is not None
            and statistics.retest_kappa is not None
            and statistics.retest_pairs[index] >= retest["min_pairs"]
        ):
            kappa = statistics.retest_kappa[index]
            if not math.isnan(kappa) and kappa < retest["min_kappa"]:
                flags.append(
                    _flag(
                        "inconsistent_retest",
                        retest,
                        f"reproduced their own ratings with kappa {kappa:.2f} over "
                        f"{statistics.retest_pairs[index]} repeated candidates (minimum "
                        f"{retest['min_kappa']})",
                        {
                            "retest_kappa": _rounded(kappa),
                            "retest_pairs": int(statistics.retest_pairs[index]),
                        },
                    )
                )
        if flags:
            result[index] = flags
    return result


def agreement_evidence_enough(
    statistics: WorkerStatistics, config: dict[str, Any], index: int
) -> bool:
    """Whether the low-agreement rule may act on a worker (not only flag): enough candidates
    compared with other raters (`exclude_min_judgments`, also as rating pairs) in enough clips
    (`exclude_min_clips`)."""
    needed = config.get("exclude_min_judgments", 0)
    return bool(
        statistics.judgments[index] >= needed
        and statistics.agreement_pairs[index] >= needed
        and statistics.clips[index] >= config.get("exclude_min_clips", 0)
    )


def _flag(
    rule: str,
    config: dict[str, Any],
    explanation: str,
    numbers: dict[str, Any],
    *,
    action: str | None = None,
) -> dict:
    return {
        "rule": rule,
        "label": RULE_LABELS.get(rule, rule),
        "action": action or config.get("action", ACTION_FLAG),
        "explanation": explanation,
        "numbers": numbers,
    }


def excluding_rules(flags: list[dict[str, Any]]) -> list[str]:
    return [flag["rule"] for flag in flags if flag.get("action") == ACTION_EXCLUDE]
