"""The seam through which annotation asks training_bridge about a campaign's metric.

A campaign names its metric by a string ("rigel-run:<TrainingRun id>" or "plugin:<name>",
`annotation.models.Campaign.metric`) because annotation sits below training_bridge and never imports
it (docs/architecture.md). Whether the named run exists, has finished and was not trained on the
campaign's clips can only be answered by training_bridge, so training_bridge registers its checker
here in its `AppConfig.ready()` (dependency inversion) and annotation's campaign service calls
`campaign_metric_problem`. Without a registered checker (a process that does not load
training_bridge) every non-empty metric is refused rather than stored unchecked.

The scoring job is sent by name (`CAMPAIGN_METRIC_SCORE_TASK`) for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# Called with the metric string and the primary keys of the campaign's clips; returns why the
# metric may not be named (None: it may).
MetricChecker = Callable[[str, frozenset[int]], "str | None"]

# The training_bridge task that scores a campaign's unscored candidates (kwargs: campaign_id).
CAMPAIGN_METRIC_SCORE_TASK = "training_bridge.tasks.campaign_metric_score"

NO_CHECKER = "No metric checker is installed here (the training_bridge app is not loaded)."

_checker: list[MetricChecker] = []


def campaign_metric_checker_register(checker: MetricChecker) -> None:
    """Install the checker (training_bridge's AppConfig.ready); a second call replaces the first."""
    _checker[:] = [checker]


def campaign_metric_problem(*, metric: str, clip_ids: Iterable[int]) -> str | None:
    """Why a campaign over these clips may not name `metric` (None: it may; "" names none)."""
    if not metric:
        return None
    if not _checker:
        return NO_CHECKER
    return _checker[0](metric, frozenset(clip_ids))
