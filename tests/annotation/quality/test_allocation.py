"""The judgment allocation policy (issue 28, point 1) on hand cases; no database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from annotation.allocation import (
    AdaptivePolicy,
    Decision,
    FixedPolicy,
    allocation_decide,
    decisions_combine,
    policy_from_dict,
    rating_range,
)

ADAPTIVE = AdaptivePolicy(minimum=2, maximum=5, disagreement_range=2)


def test_fixed_policy_wants_its_quota_then_stops_at_the_maximum_or_for_review():
    fixed = FixedPolicy(judgments=3)
    assert allocation_decide(fixed, []) == Decision(settled=False, reason=None, more=3)
    # Fixed buys its quota even when the ratings already split 1–5 (today's behaviour).
    assert allocation_decide(fixed, [1, 5]) == Decision(settled=False, reason=None, more=1)
    assert allocation_decide(fixed, [4, 4, 4]) == Decision(settled=True, reason="maximum", more=0)
    assert allocation_decide(fixed, [2, 5, 4]) == Decision(settled=True, reason="review", more=0)
    assert allocation_decide(fixed, [2, 4, 3]).reason == "maximum"


def test_adaptive_starts_with_the_minimum():
    assert allocation_decide(ADAPTIVE, []) == Decision(settled=False, reason=None, more=2)
    assert allocation_decide(ADAPTIVE, [4]) == Decision(settled=False, reason=None, more=1)


def test_adaptive_stops_at_the_minimum_when_the_ratings_agree():
    assert allocation_decide(ADAPTIVE, [4, 4]) == Decision(settled=True, reason="settled", more=0)
    assert allocation_decide(ADAPTIVE, [4, 5]) == Decision(settled=True, reason="settled", more=0)


def test_adaptive_asks_one_more_while_the_range_disagrees_up_to_the_maximum():
    assert allocation_decide(ADAPTIVE, [3, 5]) == Decision(
        settled=False, reason=None, more=1, unsettled_by=("range",)
    )
    assert allocation_decide(ADAPTIVE, [3, 5, 4, 4]).more == 1
    assert allocation_decide(ADAPTIVE, [3, 5, 4, 4, 4]) == Decision(
        settled=True, reason="maximum", more=0, unsettled_by=("range",)
    )
    # Past the maximum (a late judgment arrived anyway) it still wants nothing.
    assert allocation_decide(ADAPTIVE, [3, 5, 4, 4, 4, 3]).more == 0


def test_adaptive_stops_for_review_at_the_review_rule_range_3():
    assert allocation_decide(ADAPTIVE, [1, 4]) == Decision(settled=True, reason="review", more=0)
    assert allocation_decide(ADAPTIVE, [2, 3, 5]) == Decision(settled=True, reason="review", more=0)
    # Below the minimum too: a range never shrinks, so no crowd judgment takes it out of review.
    three = AdaptivePolicy(minimum=3, maximum=5, disagreement_range=2)
    assert allocation_decide(three, [5, 1]).reason == "review"
    # The threshold is the campaign's, as `Campaign.review_range_threshold`.
    lenient = AdaptivePolicy(disagreement_range=2, review_range_threshold=4)
    assert allocation_decide(lenient, [1, 4]).settled is False
    assert allocation_decide(lenient, [1, 5]).reason == "review"


def test_standard_error_rule_opens_a_slot_only_when_the_error_is_known_and_large():
    policy = AdaptivePolicy(disagreement_range=None, standard_error_threshold=0.4)
    assert allocation_decide(policy, [3, 4], standard_error=0.55) == Decision(
        settled=False, reason=None, more=1, unsettled_by=("standard_error",)
    )
    assert allocation_decide(policy, [3, 4], standard_error=0.4).reason == "settled"
    assert allocation_decide(policy, [3, 4], standard_error=None).reason == "settled"


def test_metric_disagreement_opens_a_slot_and_its_uncertainty_widens_the_band():
    policy = AdaptivePolicy(minimum=1, disagreement_range=None, metric_disagreement_threshold=1.0)
    # One rating of 5 against a metric saying 2.5: 2.5 apart, more than 1.0.
    assert allocation_decide(policy, [5], metric_score=2.5) == Decision(
        settled=False, reason=None, more=1, unsettled_by=("metric",)
    )
    assert allocation_decide(policy, [5], metric_score=4.2).reason == "settled"
    # The same gap with a metric unsure by 1.6: 2.5 ≤ 1.0 + 1.6, settled.
    assert allocation_decide(policy, [5], metric_score=2.5, metric_uncertainty=1.6).settled
    # No metric score yet: the rule is left out, not guessed.
    assert allocation_decide(policy, [5]).reason == "settled"
    with pytest.raises(ValueError, match="uncertainty"):
        allocation_decide(policy, [5], metric_score=2.5, metric_uncertainty=-1.0)


def test_several_rules_are_named_together():
    policy = AdaptivePolicy(disagreement_range=2, metric_disagreement_threshold=0.5)
    decision = allocation_decide(policy, [2, 4], metric_score=4.8)
    assert decision.unsettled_by == ("range", "metric")
    assert decision.more == 1


def test_decisions_of_several_questions_combine():
    open_one = Decision(settled=False, reason=None, more=1, unsettled_by=("range",))
    settled = Decision(settled=True, reason="settled", more=0)
    maximum = Decision(settled=True, reason="maximum", more=0, unsettled_by=("metric",))
    review = Decision(settled=True, reason="review", more=0)
    assert decisions_combine([settled, open_one]) == open_one
    assert decisions_combine([settled, maximum]) == Decision(
        settled=True, reason="maximum", more=0, unsettled_by=("metric",)
    )
    assert decisions_combine([open_one, review]) == Decision(
        settled=True, reason="review", more=0, unsettled_by=("range",)
    )
    with pytest.raises(ValueError):
        decisions_combine([])


def test_rating_range():
    assert rating_range([]) == 0
    assert rating_range([4]) == 0
    assert rating_range([2, 5, 3]) == 3


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"minimum": 0}, "minimum"),
        ({"minimum": 3, "maximum": 2}, "maximum"),
        ({"disagreement_range": 3}, "disagreement range"),
        ({"disagreement_range": 0}, "disagreement range"),
        ({"standard_error_threshold": 0.0}, "standard_error_threshold"),
        ({"metric_disagreement_threshold": float("nan")}, "metric_disagreement_threshold"),
        ({"review_range_threshold": 0}, "review range"),
    ],
)
def test_adaptive_policy_refuses_bad_settings(arguments, message):
    with pytest.raises(ValueError, match=message):
        AdaptivePolicy(**arguments)


def test_fixed_policy_refuses_zero_judgments():
    with pytest.raises(ValueError, match="at least one"):
        FixedPolicy(judgments=0)


def test_policies_round_trip_through_their_stored_form():
    adaptive = AdaptivePolicy(minimum=2, maximum=4, metric_disagreement_threshold=1.25)
    assert policy_from_dict(json.loads(json.dumps(adaptive.as_dict()))) == adaptive
    fixed = FixedPolicy(judgments=5)
    assert policy_from_dict(fixed.as_dict()) == fixed
    assert policy_from_dict({"kind": "adaptive"}) == AdaptivePolicy()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"kind": "bandit"}, "unknown allocation policy"),
        ({"kind": ["fixed"]}, "unknown allocation policy"),
        ({"judgments": 3}, "unknown allocation policy"),
        ({"kind": "fixed", "judgments": 3, "minimum": 2}, "unknown keys"),
        ({"kind": "fixed", "judgments": "3"}, "whole number"),
        ({"kind": "fixed", "judgments": True}, "whole number"),
        ({"kind": "adaptive", "maximum": 4.5}, "whole number"),
        ({"kind": "adaptive", "standard_error_threshold": "0.3"}, "must be a number"),
        ({"kind": "adaptive", "minimum": None}, "whole number"),
        ({"kind": "adaptive", "review_range_threshold": None}, "whole number"),
        ({"kind": "adaptive", "minimum": 6}, "maximum"),
    ],
)
def test_stored_policies_that_are_wrong_are_refused(raw, message):
    with pytest.raises(ValueError, match=message):
        policy_from_dict(raw)


def test_the_policy_module_loads_without_django():
    """The simulation and the slot engine share it, so it must stay plain Python."""
    environment = {
        key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"
    }
    probe = "import json, sys; import annotation.allocation; print(json.dumps(sorted(sys.modules)))"
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=Path(__file__).resolve().parents[3],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(completed.stdout)
    assert "annotation.allocation" in loaded
    assert [name for name in loaded if name.split(".")[0] in {"django", "celery"}] == []
