"""The judgment allocation policies under the quality wing's name: `annotation.allocation` (the
slot engine of the crowd wing, below quality, uses the policies too, so they live below both)."""

from __future__ import annotations

from annotation.allocation import (
    OPTIONAL_RULES,
    REVIEW_RANGE_THRESHOLD,
    WHOLE_SETTINGS,
    AdaptivePolicy,
    Decision,
    FixedPolicy,
    Policy,
    Reason,
    Signal,
    allocation_decide,
    decisions_combine,
    policy_from_dict,
    rating_range,
)

__all__ = [
    "OPTIONAL_RULES",
    "REVIEW_RANGE_THRESHOLD",
    "WHOLE_SETTINGS",
    "AdaptivePolicy",
    "Decision",
    "FixedPolicy",
    "Policy",
    "Reason",
    "Signal",
    "allocation_decide",
    "decisions_combine",
    "policy_from_dict",
    "rating_range",
]
