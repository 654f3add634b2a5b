"""Why a campaign candidate is left out of a release: the reasons the selection counts, in the
order it checks them, and how the pages and the dataset card name them."""

from __future__ import annotations

# Why a campaign candidate is not in a release; the first that applies is counted.
EXCLUSION_REASONS = (
    "control",
    "dropped",
    "under_review",
    "below_quota",
    "not_finalised",
    "no_valid_score",
)
# How the pages and the dataset card name them.
EXCLUSION_LABELS = {
    "control": "Control captions (quality checks, never released)",
    "dropped": "Dropped by a curator",
    "under_review": "Still under expert review",
    "below_quota": "Fewer kept judgments than the campaign asks for",
    "not_finalised": "Not finalised yet (its campaign is still collecting)",
    "no_valid_score": "No valid overall score",
}


def exclusion_label(reason: str) -> str:
    return EXCLUSION_LABELS.get(reason, reason.replace("_", " "))
