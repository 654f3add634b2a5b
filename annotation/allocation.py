"""Judgment allocation policies: how many judgments a candidate gets (issue 28, point 1).

Pure and typed, no Django (import-linter's `allocation-plain` contract): the simulation of
`bench/adaptive_allocation.py` runs it as is, and the slot engine
(`annotation.crowd.services.allocation`) calls the same `allocation_decide` when it opens and
closes slots (docs/quality.md, "Judgment allocation"). It sits at the bottom of the annotation
wings, beside `questions`, so that the crowd wing (below quality) may use it.

Two policies:

- `FixedPolicy(judgments=N)`: N judgments per candidate, whatever they say (today's behaviour).
- `AdaptivePolicy`: every candidate gets `minimum` judgments; it gets one more at a time, up to
  `maximum`, only while it is *unsettled*: its kept ratings disagree (range ≥ `disagreement_range`),
  or its calibrated score's standard error is above `standard_error_threshold`, or a metric's score
  is further from the crowd's mean than `metric_disagreement_threshold` plus the metric's own
  uncertainty. It stops as soon as none of these holds.

Why a candidate stops (`Decision.reason`):

- "review": its kept ratings reached the review rule, range ≥ `review_range_threshold` (the same
  rule and default, 3, as `Campaign.review_range_threshold` in `annotation.quality.review_queue`).
  A range never shrinks as ratings are added, so more crowd judgments cannot take the candidate out
  of the review queue: an adaptive policy stops buying them at once; the fixed policy still buys its
  N (as today) and reports "review" when they are in.
- "settled": the adaptive policy found no sign of disagreement.
- "maximum": it reached its maximum (the fixed policy's N) still unsettled.

Signals a caller cannot supply yet (no calibration fitted, no metric score) are ignored, never
guessed: `standard_error=None` leaves the standard-error rule out for that candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

Reason = Literal["settled", "maximum", "review"]
Signal = Literal["range", "standard_error", "metric"]

# The review rule's default, as `Campaign.review_range_threshold` (annotation/models.py).
REVIEW_RANGE_THRESHOLD = 3


@dataclass(frozen=True)
class FixedPolicy:
    """N judgments per candidate."""

    judgments: int = 3
    review_range_threshold: int = REVIEW_RANGE_THRESHOLD
    kind: Literal["fixed"] = "fixed"

    def __post_init__(self) -> None:
        if self.judgments < 1:
            raise ValueError("a fixed policy needs at least one judgment per candidate")
        if self.review_range_threshold < 1:
            raise ValueError("the review range threshold is at least 1")

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class AdaptivePolicy:
    """`minimum` judgments, then one more at a time up to `maximum` while unsettled (module
    docstring). A threshold of None turns its rule off."""

    minimum: int = 2
    maximum: int = 5
    disagreement_range: int | None = 2
    standard_error_threshold: float | None = None
    metric_disagreement_threshold: float | None = None
    review_range_threshold: int = REVIEW_RANGE_THRESHOLD
    kind: Literal["adaptive"] = "adaptive"

    def __post_init__(self) -> None:
        if self.minimum < 1:
            raise ValueError("the minimum is at least one judgment")
        if self.maximum < self.minimum:
            raise ValueError("the maximum must not be below the minimum")
        if self.review_range_threshold < 1:
            raise ValueError("the review range threshold is at least 1")
        if self.disagreement_range is not None and not (
            1 <= self.disagreement_range < self.review_range_threshold
        ):
            # At or above the review threshold the candidate stops for review first: the rule
            # would never open a slot.
            raise ValueError("the disagreement range lies in 1 .. review range threshold - 1")
        for name in ("standard_error_threshold", "metric_disagreement_threshold"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number or None")

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


Policy = FixedPolicy | AdaptivePolicy
# The settings whose None turns a rule off; every other setting needs a value.
OPTIONAL_RULES = frozenset(
    {"disagreement_range", "standard_error_threshold", "metric_disagreement_threshold"}
)
WHOLE_SETTINGS = frozenset(
    {"judgments", "minimum", "maximum", "disagreement_range", "review_range_threshold"}
)


def policy_from_dict(raw: Mapping[str, Any]) -> Policy:
    """The policy a stored option describes (`as_dict`'s shape); ValueError on anything else:
    an unknown kind or key, a wrong type, a value out of range."""
    kind = raw.get("kind")
    classes: dict[str, type[FixedPolicy] | type[AdaptivePolicy]] = {
        "fixed": FixedPolicy,
        "adaptive": AdaptivePolicy,
    }
    if not isinstance(kind, str) or kind not in classes:
        raise ValueError(f"unknown allocation policy {kind!r}: fixed or adaptive")
    cls = classes[kind]
    fields = {name for name in cls.__dataclass_fields__ if name != "kind"}
    unknown = set(raw) - fields - {"kind"}
    if unknown:
        raise ValueError(f"unknown keys for a {kind} policy: {sorted(unknown)}")
    values: dict[str, Any] = {}
    for name in fields & set(raw):
        value = raw[name]
        if value is None and name in OPTIONAL_RULES:
            values[name] = None
        elif name in WHOLE_SETTINGS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number")
            values[name] = value
        else:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number")
            values[name] = float(value)
    return cls(**values)


@dataclass(frozen=True)
class Decision:
    """What a candidate needs now. `settled` is True when it wants no more judgments; `reason`
    says why (None while it wants more); `more` is how many more it wants now (0 when settled);
    `unsettled_by` names the rules that found it unsettled (empty when none did)."""

    settled: bool
    reason: Reason | None
    more: int
    unsettled_by: tuple[Signal, ...] = ()


def rating_range(ratings: Sequence[int]) -> int:
    """max − min of the ratings (0 for fewer than two), the review rule's measure."""
    return max(ratings) - min(ratings) if len(ratings) >= 2 else 0


def _unsettled_by(
    policy: AdaptivePolicy,
    ratings: Sequence[int],
    standard_error: float | None,
    metric_score: float | None,
    metric_uncertainty: float | None,
) -> tuple[Signal, ...]:
    signals: list[Signal] = []
    if policy.disagreement_range is not None and rating_range(ratings) >= policy.disagreement_range:
        signals.append("range")
    threshold = policy.standard_error_threshold
    if threshold is not None and standard_error is not None and standard_error > threshold:
        signals.append("standard_error")
    threshold = policy.metric_disagreement_threshold
    if threshold is not None and metric_score is not None and ratings:
        mean = sum(ratings) / len(ratings)
        # A metric unsure of its own score (a wide five-way distribution) needs a larger gap.
        if abs(mean - metric_score) > threshold + (metric_uncertainty or 0.0):
            signals.append("metric")
    return tuple(signals)


def allocation_decide(
    policy: Policy,
    ratings: Sequence[int],
    *,
    standard_error: float | None = None,
    metric_score: float | None = None,
    metric_uncertainty: float | None = None,
) -> Decision:
    """Decide for one candidate (one question) from its kept ratings so far.

    `standard_error` is its calibrated score's standard error, `metric_score` a metric's score on
    the same 1..K scale as the ratings and `metric_uncertainty` that score's spread (both on the
    rating scale); any of them may be None. A campaign of several questions decides per question
    and combines with `decisions_combine`.
    """
    count = len(ratings)
    if metric_uncertainty is not None and not metric_uncertainty >= 0:
        raise ValueError("the metric's uncertainty is a non-negative number")
    reaches_review = rating_range(ratings) >= policy.review_range_threshold
    if isinstance(policy, FixedPolicy):
        if count < policy.judgments:
            return Decision(settled=False, reason=None, more=policy.judgments - count)
        return Decision(settled=True, reason="review" if reaches_review else "maximum", more=0)
    if reaches_review:
        return Decision(settled=True, reason="review", more=0)
    if count < policy.minimum:
        return Decision(settled=False, reason=None, more=policy.minimum - count)
    signals = _unsettled_by(policy, ratings, standard_error, metric_score, metric_uncertainty)
    if not signals:
        return Decision(settled=True, reason="settled", more=0)
    if count >= policy.maximum:
        return Decision(settled=True, reason="maximum", more=0, unsettled_by=signals)
    return Decision(settled=False, reason=None, more=1, unsettled_by=signals)


_REASON_ORDER: dict[Reason, int] = {"settled": 0, "maximum": 1, "review": 2}


def decisions_combine(decisions: Sequence[Decision]) -> Decision:
    """One candidate's decision from its questions' decisions. The review queue takes a
    candidate when any question reaches the review range, so a "review" on one question stops
    the candidate; otherwise it wants the most any question wants, and once all are settled the
    weightiest reason wins (maximum > settled)."""
    if not decisions:
        raise ValueError("no decision to combine")
    signals = tuple(dict.fromkeys(signal for d in decisions for signal in d.unsettled_by))
    if any(decision.reason == "review" for decision in decisions):
        return Decision(settled=True, reason="review", more=0, unsettled_by=signals)
    open_decisions = [decision for decision in decisions if not decision.settled]
    if open_decisions:
        more = max(decision.more for decision in open_decisions)
        return Decision(settled=False, reason=None, more=more, unsettled_by=signals)
    reason = max((d.reason for d in decisions if d.reason), key=_REASON_ORDER.__getitem__)
    return Decision(settled=True, reason=reason, more=0, unsettled_by=signals)
