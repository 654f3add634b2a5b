"""The QC rule registry: every entry is complete, stored settings are checked against it, and a
rule added to a registry is evaluated by `rules_evaluate` as it stands (no database)."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from annotation.quality.rules import (
    ACTION_EXCLUDE,
    ACTION_FLAG,
    DEFAULT_QC_RULES,
    RULE_LABELS,
    RULES,
    Rule,
    RuleConfig,
    RuleFinding,
    RuleFlag,
    qc_rules_merge,
    qc_rules_validate,
    rule_configs,
    rules_evaluate,
)
from annotation.quality.statistics import WorkerStatistics


def _statistics(workers: int, **overrides: list[float]) -> WorkerStatistics:
    """Statistics of `workers` workers: zero counts and NaN figures except `overrides`."""
    values: dict[str, Any] = {}
    for item in dataclasses.fields(WorkerStatistics):
        if item.name in ("campaign_median_seconds", "extra", "retest_pairs", "retest_kappa"):
            continue
        integer = item.type.endswith("np.int64]")  # type: ignore[union-attr]
        values[item.name] = np.zeros(workers, np.int64) if integer else np.full(workers, np.nan)
    for name, column in overrides.items():
        values[name] = np.asarray(column, dtype=values[name].dtype)
    return WorkerStatistics(**values)


def test_every_registry_entry_has_a_config_type_a_label_and_json_defaults():
    names = [rule.name for rule in RULES]
    assert names == [
        "too_fast",
        "uniform",
        "failed_controls",
        "low_agreement",
        "inconsistent_retest",
    ]
    for rule in RULES:
        assert issubclass(rule.config_type, RuleConfig)
        assert dataclasses.is_dataclass(rule.config_type)
        assert rule.config_type.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert RULE_LABELS[rule.name] == rule.label
        defaults = DEFAULT_QC_RULES[rule.name]
        assert list(defaults)[:2] == ["enabled", "action"]
        assert rule.config_type.from_json(json.loads(json.dumps(defaults))) == rule.config_type()
    # Only the agreement rule waits for the first round's exclusions.
    assert [rule.name for rule in RULES if rule.after_exclusions] == ["low_agreement"]


def test_stored_settings_keep_their_shape_and_unknown_rules_are_refused():
    assert DEFAULT_QC_RULES["too_fast"] == {
        "enabled": True,
        "action": "exclude",
        "min_judgments": 6,
        "min_clips": 3,
        "max_ratio_to_campaign_median": 0.35,
        "max_ratio_to_clip_length": 0.5,
    }
    assert DEFAULT_QC_RULES["inconsistent_retest"] == {
        "enabled": False,
        "action": "flag",
        "min_pairs": 10,
        "min_kappa": 0.4,
    }
    assert qc_rules_validate({"too_slow": {"enabled": True}, "uniform": {"speed": 1}}) == [
        "unknown rule 'too_slow'",
        "uniform.speed: unknown setting",
    ]
    # A stored unknown rule is kept by the merge (documented, ignored) but never evaluated.
    merged = qc_rules_merge({"too_slow": {"enabled": True}, "uniform": False})
    configs = rule_configs(merged)
    assert "too_slow" in merged and "too_slow" not in configs
    assert configs["uniform"].enabled is False


def test_rule_findings_become_flags_with_the_stored_json_shape():
    statistics = _statistics(
        2,
        control_items=[5, 5],
        control_passed=[1, 5],
        control_accuracy=[0.2, 1.0],
    )
    configs = rule_configs(qc_rules_merge({}))
    flags = rules_evaluate(statistics, configs, worker_indices=[0, 1])
    assert list(flags) == [0]
    assert [flag.as_json() for flag in flags[0]] == [
        {
            "rule": "failed_controls",
            "label": "Failed control items",
            "action": "exclude",
            "explanation": "1 of 5 control items rated as expected (20%; minimum 60%)",
            "numbers": {"control_items": 5, "control_passed": 1, "control_accuracy": 0.2},
        }
    ]
    overridden = dataclasses.replace(flags[0][0], action=ACTION_FLAG, override=True)
    assert overridden.as_json()["override"] is True
    assert list(overridden.as_json()) == [
        "rule",
        "label",
        "action",
        "explanation",
        "numbers",
        "override",
    ]


@dataclass(frozen=True)
class _SlowConfig(RuleConfig):
    action: str = ACTION_FLAG
    max_seconds: float = 30


def _too_slow(statistics: WorkerStatistics, config: _SlowConfig, index: int) -> RuleFinding | None:
    seconds = statistics.median_seconds_per_candidate[index]
    if math.isnan(seconds) or seconds <= config.max_seconds:
        return None
    return RuleFinding(f"{seconds:.0f} s per candidate", {"seconds": float(seconds)})


def test_a_rule_added_to_the_registry_is_evaluated_without_changing_rules_evaluate():
    registry = (*RULES, Rule("too_slow", "Too slow", _SlowConfig, _too_slow))
    statistics = _statistics(
        3,
        median_seconds_per_candidate=[40.0, 10.0, 90.0],
        control_items=[4, 0, 0],
        control_passed=[0, 0, 0],
        control_accuracy=[0.0, math.nan, math.nan],
    )
    merged = qc_rules_merge({"too_slow": {"max_seconds": 60}})
    configs = rule_configs(merged, registry=registry)
    assert configs["too_slow"] == _SlowConfig(max_seconds=60)

    flags = rules_evaluate(statistics, configs, worker_indices=[0, 1, 2], registry=registry)

    assert {index: [flag.rule for flag in found] for index, found in flags.items()} == {
        0: ["failed_controls"],
        2: ["too_slow"],
    }
    assert flags[2] == [
        RuleFlag(
            rule="too_slow",
            label="Too slow",
            action=ACTION_FLAG,
            explanation="90 s per candidate",
            numbers={"seconds": 90.0},
        )
    ]
    # Disabled in the stored settings: not evaluated.
    configs["too_slow"] = _SlowConfig(enabled=False)
    flags = rules_evaluate(statistics, configs, worker_indices=[0, 1, 2], registry=registry)
    assert list(flags) == [0] and flags[0][0].action == ACTION_EXCLUDE
    # The default registry does not know the toy rule.
    assert "too_slow" not in rule_configs(merged)
