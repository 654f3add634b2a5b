"""A campaign's metric in the loop (issue 28; docs/quality.md, "The metric in the loop"): checking
the metric a curator names, and asking for the candidates' scores.

The metric is a string (`Campaign.metric`): the run or plug-in it names lives in training_bridge,
above annotation, so the check goes through `common.campaign_metric` (training_bridge registers the
checker) and the scoring job is sent by its registered name. The job scores the candidates whose
`metric_score` is still empty, so asking twice costs one query.
"""

from __future__ import annotations

from collections.abc import Iterable

from annotation.models import Campaign, CampaignCandidate
from common.broker import enqueue, task_named
from common.campaign_metric import CAMPAIGN_METRIC_SCORE_TASK, campaign_metric_problem


def campaign_metric_check(*, metric: str, clip_ids: Iterable[int]) -> str | None:
    """Why a campaign over these clips may not name `metric` (None: it may)."""
    return campaign_metric_problem(metric=metric, clip_ids=clip_ids)


def campaign_metric_score_enqueue(*, campaign: Campaign) -> bool:
    """Send the scoring job once the current transaction commits, if the campaign names a metric
    (True when it was asked)."""
    if not campaign.metric:
        return False
    enqueue(task_named(CAMPAIGN_METRIC_SCORE_TASK), campaign_id=campaign.pk)
    return True


def campaign_metric_scores_clear(*, campaign: Campaign) -> int:
    """Forget every candidate's metric score (the campaign names another metric now)."""
    return CampaignCandidate.objects.filter(campaign=campaign).update(
        metric_score=None, metric_uncertainty=None
    )
