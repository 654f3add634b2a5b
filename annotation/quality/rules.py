"""Quality-control rules: a registry of one function per rule, each with a typed configuration.

A rule reads a worker's row of `WorkerStatistics` (`annotation.quality.statistics`) and either
finds nothing or returns a `RuleFinding` (an explanation and its numbers); `rules_evaluate` walks
the registry and turns each finding into a `RuleFlag`. Adding a rule is writing its config
dataclass and its function and appending a `Rule` to `RULES`: the defaults, the labels, the
validation of `Campaign.qc_rules` and the evaluation all come from the registry.

Rules are configured per campaign in `Campaign.qc_rules` (a JSON object) and merged over
`DEFAULT_QC_RULES`; see docs/quality.md for the meaning of every number. The JSON shapes (the
stored rule settings and the stored flags) are those of the dict-based code this replaced:
`RuleConfig.as_json` and `RuleFlag.as_json` are the boundary.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Generic, NotRequired, Self, TypedDict, TypeVar

import numpy as np
from numpy.typing import NDArray

from annotation.quality.statistics import WorkerStatistics

ACTION_EXCLUDE = "exclude"
ACTION_FLAG = "flag"

# The numbers a flag shows beside its explanation (None: no value).
FlagNumbers = dict[str, float | None]


# ----------------------------------------------------------------------------------------------
# Configurations (one frozen dataclass per rule; field order is the JSON key order)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleConfig:
    enabled: bool = True
    action: str = ACTION_EXCLUDE

    @classmethod
    def from_json(cls, settings: Mapping[str, Any]) -> Self:
        """The settings of a merged `qc_rules` entry; keys this rule does not know are ignored
        (`qc_rules_merge` keeps them, documented as ignored)."""
        return cls(
            **{item.name: settings[item.name] for item in fields(cls) if item.name in settings}
        )

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TooFastConfig(RuleConfig):
    """Much faster than everyone else, or not even long enough to have watched the clip. A
    pattern rule: it acts only on evidence from several clips (`min_clips`), never on one clip
    alone."""

    min_judgments: float = 6
    min_clips: float = 3
    max_ratio_to_campaign_median: float = 0.35
    max_ratio_to_clip_length: float = 0.5


@dataclass(frozen=True)
class UniformConfig(RuleConfig):
    """The same value for everything: whole assignments rated identically, or hardly any
    variance. Both tests need `min_assignments` clips: one clip of six good captions honestly
    rated 5 on every question is 18 equal ratings, and says nothing about the worker."""

    min_assignments: float = 4
    min_ratings: float = 12
    max_uniform_share: float = 0.75
    min_variance: float = 0.1


@dataclass(frozen=True)
class FailedControlsConfig(RuleConfig):
    """Control items rated outside their expected range too often."""

    min_controls: float = 3
    min_accuracy: float = 0.6


@dataclass(frozen=True)
class LowAgreementConfig(RuleConfig):
    """Ratings that do not go with the other workers' ratings of the same candidates. Flagged
    (listed for a curator) from `min_judgments` candidates on; acted on (`action`) only with the
    evidence of `exclude_min_judgments` candidates compared with other raters over
    `exclude_min_clips` clips: this is what catches a worker who answers at random at human speed
    in a campaign without control items."""

    min_judgments: float = 8
    min_correlation: float = 0.2
    exclude_min_judgments: float = 24
    exclude_min_clips: float = 4


@dataclass(frozen=True)
class InconsistentRetestConfig(RuleConfig):
    """Test-retest (campaigns with `retest_share` > 0): the worker's second ratings of candidates
    they rated before do not reproduce the first ones. Off by default; acts only once the worker
    has `min_pairs` repeated candidates (fewer pairs give a noisy kappa)."""

    enabled: bool = False
    action: str = ACTION_FLAG
    min_pairs: float = 10
    min_kappa: float = 0.4


# ----------------------------------------------------------------------------------------------
# Findings and flags
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleFinding:
    """What a rule found about one worker. `action` overrides the rule's configured action (the
    low-agreement rule only flags while the evidence is too thin to act on)."""

    explanation: str
    numbers: FlagNumbers
    action: str | None = None


class FlagJson(TypedDict):
    rule: str
    label: str
    action: str
    explanation: str
    numbers: FlagNumbers
    override: NotRequired[bool]


@dataclass(frozen=True)
class RuleFlag:
    """A rule a worker trips. `override`: the worker was re-included by a curator, so a rule that
    would exclude only flags."""

    rule: str
    label: str
    action: str
    explanation: str
    numbers: FlagNumbers
    override: bool = False

    def as_json(self) -> FlagJson:
        stored: FlagJson = {
            "rule": self.rule,
            "label": self.label,
            "action": self.action,
            "explanation": self.explanation,
            "numbers": self.numbers,
        }
        if self.override:
            stored["override"] = True
        return stored


def _below(value: float, limit: float) -> bool:
    """A statistic under its limit; NaN (not computable for this worker) never is."""
    return not math.isnan(value) and value < limit


def _rounded(value: float) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), 3)


# ----------------------------------------------------------------------------------------------
# The rules (statistics of worker `index` in, a finding or None out)
# ----------------------------------------------------------------------------------------------


def too_fast(statistics: WorkerStatistics, config: TooFastConfig, index: int) -> RuleFinding | None:
    if not (
        statistics.timed_judgments[index] >= config.min_judgments
        and statistics.timed_clips[index] >= config.min_clips
    ):
        return None
    campaign_median = statistics.campaign_median_seconds
    ratio = statistics.speed_vs_campaign[index]
    clip_ratio = statistics.speed_vs_clip_length[index]
    reasons = []
    if _below(ratio, config.max_ratio_to_campaign_median):
        reasons.append(
            f"typical {statistics.median_seconds_per_candidate[index]:.1f} s per candidate"
            f" is {ratio:.2f}× the campaign's {campaign_median or 0:.1f} s "
            f"(limit {config.max_ratio_to_campaign_median}×)"
        )
    if _below(clip_ratio, config.max_ratio_to_clip_length):
        reasons.append(
            f"typical time on a clip is {clip_ratio:.2f}× the clip's length "
            f"(limit {config.max_ratio_to_clip_length}×)"
        )
    if not reasons:
        return None
    return RuleFinding(
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


def uniform(statistics: WorkerStatistics, config: UniformConfig, index: int) -> RuleFinding | None:
    # Both uniformity tests wait for `min_assignments` clips (see UniformConfig).
    if statistics.uniform_assignments[index] < config.min_assignments:
        return None
    share = statistics.uniform_share[index]
    variance = statistics.rating_variance[index]
    reasons = []
    if not math.isnan(share) and share > config.max_uniform_share:
        reasons.append(
            f"{share:.0%} of {statistics.uniform_assignments[index]} clips rated with "
            f"one single value (limit {config.max_uniform_share:.0%})"
        )
    if statistics.ratings[index] >= config.min_ratings and _below(variance, config.min_variance):
        reasons.append(
            f"variance of {statistics.ratings[index]} ratings is {variance:.3f} "
            f"(minimum {config.min_variance})"
        )
    if not reasons:
        return None
    return RuleFinding(
        "; ".join(reasons),
        {
            "uniform_share": _rounded(share),
            "assignments": int(statistics.uniform_assignments[index]),
            "rating_variance": _rounded(variance),
            "ratings": int(statistics.ratings[index]),
        },
    )


def failed_controls(
    statistics: WorkerStatistics, config: FailedControlsConfig, index: int
) -> RuleFinding | None:
    accuracy = statistics.control_accuracy[index]
    enough = statistics.control_items[index] >= config.min_controls
    if not enough or not _below(accuracy, config.min_accuracy):
        return None
    return RuleFinding(
        f"{statistics.control_passed[index]} of {statistics.control_items[index]}"
        f" control items rated as expected ({accuracy:.0%}; minimum "
        f"{config.min_accuracy:.0%})",
        {
            "control_items": int(statistics.control_items[index]),
            "control_passed": int(statistics.control_passed[index]),
            "control_accuracy": _rounded(accuracy),
        },
    )


def low_agreement(
    statistics: WorkerStatistics, config: LowAgreementConfig, index: int
) -> RuleFinding | None:
    correlation = statistics.agreement[index]
    enough = statistics.judgments[index] >= config.min_judgments
    if not enough or not _below(correlation, config.min_correlation):
        return None
    enough = agreement_evidence_enough(statistics, config, index)
    return RuleFinding(
        f"correlation with the other workers' mean is {correlation:.2f} over "
        f"{statistics.agreement_pairs[index]} ratings of "
        f"{statistics.judgments[index]} candidates in "
        f"{statistics.clips[index]} clips (minimum "
        f"{config.min_correlation})" + ("" if enough else "; too little evidence yet to act on"),
        {
            "agreement": _rounded(correlation),
            "pairs": int(statistics.agreement_pairs[index]),
            "judgments": int(statistics.judgments[index]),
            "clips": int(statistics.clips[index]),
        },
        action=None if enough else ACTION_FLAG,
    )


def agreement_evidence_enough(
    statistics: WorkerStatistics, config: LowAgreementConfig, index: int
) -> bool:
    """Whether the low-agreement rule may act on a worker (not only flag): enough candidates
    compared with other raters (`exclude_min_judgments`, also as rating pairs) in enough clips
    (`exclude_min_clips`)."""
    needed = config.exclude_min_judgments
    return bool(
        statistics.judgments[index] >= needed
        and statistics.agreement_pairs[index] >= needed
        and statistics.clips[index] >= config.exclude_min_clips
    )


def inconsistent_retest(
    statistics: WorkerStatistics, config: InconsistentRetestConfig, index: int
) -> RuleFinding | None:
    # The retest figures are loaded only when the rule is on (None otherwise).
    if statistics.retest_pairs is None or statistics.retest_kappa is None:
        return None
    kappa = statistics.retest_kappa[index]
    enough = statistics.retest_pairs[index] >= config.min_pairs
    if not enough or not _below(kappa, config.min_kappa):
        return None
    return RuleFinding(
        f"reproduced their own ratings with kappa {kappa:.2f} over "
        f"{statistics.retest_pairs[index]} repeated candidates (minimum "
        f"{config.min_kappa})",
        {
            "retest_kappa": _rounded(kappa),
            "retest_pairs": int(statistics.retest_pairs[index]),
        },
    )


# ----------------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------------

ConfigT = TypeVar("ConfigT", bound=RuleConfig)


@dataclass(frozen=True)
class Rule(Generic[ConfigT]):
    """One registry entry. `after_exclusions`: the rule measures a worker against the others, so
    it runs in the second round, against the workers who survive the first (see
    `annotation.quality.evaluation`)."""

    name: str
    label: str
    config_type: type[ConfigT]
    check: Callable[[WorkerStatistics, ConfigT, int], RuleFinding | None]
    after_exclusions: bool = False


# Evaluation order is registry order (it is the order of a worker's flags).
RULES: tuple[Rule[Any], ...] = (
    Rule("too_fast", "Too fast", TooFastConfig, too_fast),
    Rule("uniform", "Uniform ratings", UniformConfig, uniform),
    Rule("failed_controls", "Failed control items", FailedControlsConfig, failed_controls),
    Rule(
        "low_agreement", "Low agreement", LowAgreementConfig, low_agreement, after_exclusions=True
    ),
    Rule(
        "inconsistent_retest",
        "Inconsistent on repeats",
        InconsistentRetestConfig,
        inconsistent_retest,
    ),
)

DEFAULT_QC_RULES: dict[str, dict[str, Any]] = {
    rule.name: rule.config_type().as_json() for rule in RULES
}

RULE_LABELS: dict[str, str] = {rule.name: rule.label for rule in RULES}


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
            problems.extend(_setting_problems(name, key, value))
    return problems


def _setting_problems(name: str, key: str, value: Any) -> list[str]:
    if key not in DEFAULT_QC_RULES[name]:
        return [f"{name}.{key}: unknown setting"]
    if key == "action":
        if value not in (ACTION_EXCLUDE, ACTION_FLAG):
            return [f"{name}.action: must be 'exclude' or 'flag'"]
    elif key == "enabled":
        if not isinstance(value, bool):
            return [f"{name}.enabled: must be true or false"]
    elif not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        return [f"{name}.{key}: must be a non-negative number"]
    return []


def rule_configs(
    merged: Mapping[str, Mapping[str, Any]], *, registry: Sequence[Rule[Any]] = RULES
) -> dict[str, RuleConfig]:
    """Typed configurations of the registry's rules present in merged `qc_rules` (names the
    registry does not know are left out)."""
    return {
        rule.name: rule.config_type.from_json(merged[rule.name])
        for rule in registry
        if rule.name in merged
    }


# ----------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------


def rules_evaluate(
    statistics: WorkerStatistics,
    configs: Mapping[str, RuleConfig],
    *,
    worker_indices: NDArray[np.int64] | list[int],
    registry: Sequence[Rule[Any]] = RULES,
) -> dict[int, list[RuleFlag]]:
    """The flags each worker trips under the enabled rules of `configs`: {worker index: flags in
    registry order}. Workers without flags are absent. The caller decides which workers rules may
    act on (never imported rater slots)."""
    active = [
        (rule, configs[rule.name])
        for rule in registry
        if rule.name in configs and configs[rule.name].enabled
    ]
    result: dict[int, list[RuleFlag]] = {}
    for index in np.asarray(worker_indices, dtype=np.int64).tolist():
        flags = [
            _flag(rule, config, finding)
            for rule, config in active
            if (finding := rule.check(statistics, config, index)) is not None
        ]
        if flags:
            result[index] = flags
    return result


def _flag(rule: Rule[Any], config: RuleConfig, finding: RuleFinding) -> RuleFlag:
    return RuleFlag(
        rule=rule.name,
        label=rule.label,
        action=finding.action or config.action,
        explanation=finding.explanation,
        numbers=finding.numbers,
    )


def excluding_rules(flags: Iterable[RuleFlag]) -> list[str]:
    return [flag.rule for flag in flags if flag.action == ACTION_EXCLUDE]
