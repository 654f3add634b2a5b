"""Adaptive judgment allocation in the slot engine (issue 28, point 1; docs/quality.md, "Judgment
allocation").

A campaign's `allocation` is `{}` (the fixed policy: `judgments_per_candidate` each, today's
behaviour, and nothing here runs for it) or an `AdaptivePolicy.as_dict()`. Under an adaptive
policy every candidate starts with `quota = minimum`; `allocation_redecide` then decides again,
from what is known now, how many judgments each of the given candidates wants:

* its *kept* crowd ratings, per question (`allocation_decide` per question, combined with
  `decisions_combine`: a "review" on any question stops the candidate);
* its calibrated standard error per question, where a calibration exists
  (`CandidateCalibration.standard_errors`; None otherwise, and that rule is left out);
* the campaign metric's score and uncertainty (`CampaignCandidate.metric_score`,
  `metric_uncertainty`), compared with the crowd's overall rating per judgment (the overall
  question's rating, else the mean of the judgment's ratings).

What a decision writes, and the invariants it keeps:

* unsettled: `quota = max(slots_taken, min(maximum, kept + more))`, `stop_reason = ""`. A live
  lease is a judgment on its way (`slots_taken` counts it), so it fills a wanted slot rather than
  adding one; the quota never exceeds `maximum` and never drops below `slots_taken` (the CHECK
  constraint), so no candidate ever gets more than `maximum` kept + live judgments.
* settled (its raters agree, it reached the maximum or the review range): `stop_reason` says why
  and `quota = slots_taken`: no new slot, while a live lease may still be submitted. Its
  judgment re-decides the candidate (a late disagreement reopens it).
* `opened_by` gains the rules that found an unsettled candidate past its minimum (each once);
* `CampaignClip.open_slots` moves by the change of quota, under the clip's row lock.

Lock order, as the engine's (`services.assignment`): the caller may hold Participation and
Assignment rows (the submit does); here the CampaignClip row, then its CampaignCandidate rows in
id order. The ratings are read after the clip lock is held, so two submits of one clip decide one
after the other, each seeing the other's judgments (READ COMMITTED takes a fresh snapshot per
statement).

Callers: the submit (`services.submission`, in its transaction, adaptive campaigns only), QC's
exclusions and re-inclusions (`annotation.quality.exclusions`, in theirs), and the Celery task
`annotation.allocation_redecide`, which the metric's scoring job sends by name after writing
scores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import transaction
from django.db.models import F

from annotation.allocation import (
    AdaptivePolicy,
    Decision,
    FixedPolicy,
    Policy,
    Signal,
    allocation_decide,
    decisions_combine,
    policy_from_dict,
)
from annotation.models import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    CandidateCalibration,
    Judgment,
    JudgmentSource,
)


def campaign_policy(campaign: Campaign) -> Policy:
    """The campaign's allocation policy: its stored adaptive policy, else the fixed one."""
    if not campaign.allocation:
        return FixedPolicy(
            judgments=campaign.judgments_per_candidate,
            review_range_threshold=campaign.review_range_threshold,
        )
    return policy_from_dict(campaign.allocation)


def campaign_is_adaptive(campaign: Campaign) -> bool:
    return bool(campaign.allocation) and campaign.allocation.get("kind") == "adaptive"


def initial_quota(campaign: Campaign) -> int:
    """The quota a new candidate starts with: the adaptive minimum, else judgments per candidate."""
    policy = campaign_policy(campaign)
    return policy.minimum if isinstance(policy, AdaptivePolicy) else policy.judgments


@dataclass(frozen=True)
class _Candidate:
    """One candidate as locked: its slot counters, its allocation state and what feeds the rules."""

    id: int
    quota: int
    slots_taken: int
    stop_reason: str
    opened_by: tuple[str, ...]
    metric_score: float | None
    metric_uncertainty: float | None


@dataclass(frozen=True)
class _Outcome:
    quota: int
    stop_reason: str
    opened_by: tuple[str, ...]


def allocation_redecide(*, campaign_id: int, campaign_candidate_ids: Iterable[int]) -> int:
    """Decide again how many judgments these candidates of the campaign want (module docstring);
    returns how many candidates changed. Nothing for a fixed campaign or a control item. Runs in
    the caller's transaction when there is one (it must not hold CampaignClip or CampaignCandidate
    locks of other clips taken out of order), else in its own."""
    return campaign_allocation_redecide(
        campaign=Campaign.objects.get(pk=campaign_id),
        campaign_candidate_ids=campaign_candidate_ids,
    )


def campaign_allocation_redecide(
    *, campaign: Campaign, campaign_candidate_ids: Iterable[int]
) -> int:
    """`allocation_redecide` for a campaign already loaded (the submit has it)."""
    if not campaign_is_adaptive(campaign):
        return 0
    policy = campaign_policy(campaign)
    assert isinstance(policy, AdaptivePolicy)
    by_clip: dict[int, list[int]] = {}
    for pk, clip_id in CampaignCandidate.objects.filter(
        campaign_id=campaign.pk, id__in=list(campaign_candidate_ids), is_control=False
    ).values_list("id", "clip_id"):
        by_clip.setdefault(clip_id, []).append(pk)
    changed = 0
    with transaction.atomic():
        for clip_id, ids in sorted(by_clip.items()):
            changed += _clip_redecide(campaign=campaign, policy=policy, clip_id=clip_id, ids=ids)
    return changed


def _clip_redecide(
    *, campaign: Campaign, policy: AdaptivePolicy, clip_id: int, ids: list[int]
) -> int:
    campaign_clip_id = (
        CampaignClip.objects.select_for_update()
        .filter(campaign_id=campaign.pk, clip_id=clip_id)
        .values_list("id", flat=True)
        .first()
    )
    candidates = [
        _Candidate(*row[:4], tuple(row[4] or ()), *row[5:])
        for row in CampaignCandidate.objects.select_for_update()
        .filter(id__in=ids)
        .order_by("id")
        .values_list(
            "id",
            "quota",
            "slots_taken",
            "stop_reason",
            "opened_by",
            "metric_score",
            "metric_uncertainty",
        )
    ]
    ratings: dict[int, list[dict[str, int]]] = {candidate.id: [] for candidate in candidates}
    for candidate_id, values in Judgment.objects.filter(
        campaign_candidate_id__in=ids, is_excluded=False, source=JudgmentSource.CROWD
    ).values_list("campaign_candidate_id", "values"):
        ratings[candidate_id].append(values)
    errors = dict(
        CandidateCalibration.objects.filter(campaign_candidate_id__in=ids).values_list(
            "campaign_candidate_id", "standard_errors"
        )
    )
    changed = 0
    open_delta = 0
    for candidate in candidates:
        decision = candidate_decide(
            policy=policy,
            questions=[question["key"] for question in campaign.questions],
            overall_key=campaign.overall_question_key,
            ratings=ratings[candidate.id],
            standard_errors=errors.get(candidate.id) or {},
            metric_score=candidate.metric_score,
            metric_uncertainty=candidate.metric_uncertainty,
        )
        outcome = _outcome(
            candidate=candidate, decision=decision, kept=len(ratings[candidate.id]), policy=policy
        )
        if outcome == _Outcome(candidate.quota, candidate.stop_reason, candidate.opened_by):
            continue
        CampaignCandidate.objects.filter(pk=candidate.id).update(
            quota=outcome.quota, stop_reason=outcome.stop_reason, opened_by=list(outcome.opened_by)
        )
        open_delta += outcome.quota - candidate.quota
        changed += 1
    if campaign_clip_id is not None and open_delta:
        CampaignClip.objects.filter(pk=campaign_clip_id).update(
            open_slots=F("open_slots") + open_delta
        )
    return changed


def candidate_decide(
    *,
    policy: AdaptivePolicy,
    questions: Sequence[str],
    overall_key: str,
    ratings: Sequence[Mapping[str, Any]],
    standard_errors: Mapping[str, Any],
    metric_score: float | None,
    metric_uncertainty: float | None,
) -> Decision:
    """One candidate's decision: per question from its kept ratings and standard error, plus the
    metric against the crowd's overall rating per judgment (the overall question's, else the mean
    of the judgment's ratings), combined."""
    crowd_only = dataclasses.replace(policy, metric_disagreement_threshold=None)
    decisions = [
        allocation_decide(
            crowd_only,
            [values[key] for values in ratings if key in values],
            standard_error=_number(standard_errors.get(key)),
        )
        for key in questions
    ]
    if metric_score is not None and policy.metric_disagreement_threshold is not None:
        metric_only = dataclasses.replace(
            policy, disagreement_range=None, standard_error_threshold=None
        )
        overall = [
            _overall(values, questions=questions, overall_key=overall_key) for values in ratings
        ]
        # The policy compares means and ranges only, so a mean rating (a float) serves as well.
        decisions.append(
            allocation_decide(
                metric_only,
                cast("list[int]", [value for value in overall if value is not None]),
                metric_score=metric_score,
                metric_uncertainty=metric_uncertainty,
            )
        )
    return decisions_combine(decisions)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _overall(
    values: Mapping[str, Any], *, questions: Sequence[str], overall_key: str
) -> float | None:
    if overall_key:
        return values.get(overall_key)
    given = [values[key] for key in questions if key in values]
    return sum(given) / len(given) if given else None


def _outcome(
    *, candidate: _Candidate, decision: Decision, kept: int, policy: AdaptivePolicy
) -> _Outcome:
    taken = candidate.slots_taken
    if decision.settled:
        assert decision.reason is not None
        return _Outcome(max(taken, 1), decision.reason, candidate.opened_by)
    opened: tuple[str, ...] = candidate.opened_by
    signals: tuple[Signal, ...] = decision.unsettled_by
    opened += tuple(signal for signal in signals if signal not in opened)
    return _Outcome(max(taken, min(policy.maximum, kept + decision.more)), "", opened)
