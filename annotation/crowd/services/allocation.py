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
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import transaction

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
from annotation.crowd.services import crowd_sql as sql
from annotation.models import Campaign, CandidateCalibration, JudgmentSource


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
    campaign_clip_id: int
    quota: int
    slots_taken: int
    stop_reason: str
    opened_by: tuple[str, ...]
    metric_score: float | None
    metric_uncertainty: float | None
    standard_errors: Mapping[str, Any]
    ratings: Sequence[Mapping[str, Any]]  # the kept crowd judgments' values


@dataclass(frozen=True)
class _Outcome:
    quota: int
    stop_reason: str
    opened_by: tuple[str, ...]


def allocation_redecide(*, campaign_id: int, campaign_candidate_ids: Iterable[int]) -> int:
    """Decide again how many judgments these candidates of the campaign want (module docstring);
    returns how many candidates changed. Nothing for a fixed campaign or a control item. Runs in
    the caller's transaction when there is one (holding no CampaignClip or CampaignCandidate lock
    taken out of the engine's order), else each statement in its own."""
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
    ids = sorted(set(campaign_candidate_ids))
    if not ids:
        return 0
    rules = _Rules.of(campaign)
    # No savepoint inside the submit's transaction; a transaction of its own otherwise.
    with transaction.atomic(savepoint=False):
        # Three statements, none ORM-built (the submit's hot path, see services.crowd_sql):
        # 1. the clip rows, in id order (the engine's lock order: clips before candidates);
        sql.fetchall(_LOCK_CLIPS, [campaign.pk, ids], prepared=True)
        # 2. the candidates, locked in id order, with their kept ratings and standard errors;
        rows = sql.fetchall(_LOCK_CANDIDATES, [campaign.pk, ids], prepared=True)
        changed: list[tuple[_Candidate, _Outcome]] = []
        for row in rows:
            candidate = _Candidate(
                id=row[0],
                quota=row[1],
                slots_taken=row[2],
                stop_reason=row[3],
                opened_by=tuple(sql.py_json(row[4]) or ()),
                metric_score=row[5],
                metric_uncertainty=row[6],
                standard_errors=sql.py_json(row[7]) or {},
                ratings=sql.py_json(row[8]) or [],
                campaign_clip_id=row[9],
            )
            outcome = _outcome(candidate=candidate, decision=rules.decide(candidate), rules=rules)
            if outcome != _Outcome(candidate.quota, candidate.stop_reason, candidate.opened_by):
                changed.append((candidate, outcome))
        # 3. the changed candidates, and their clips' counters by the change of quota.
        if changed:
            _write(changed)
    return len(changed)


def _write(changed: list[tuple[_Candidate, _Outcome]]) -> None:
    deltas: dict[int, int] = {}
    for candidate, outcome in changed:
        clip = candidate.campaign_clip_id
        deltas[clip] = deltas.get(clip, 0) + outcome.quota - candidate.quota
    sql.execute(
        _WRITE,
        [
            [candidate.id for candidate, _outcome in changed],
            [outcome.quota for _candidate, outcome in changed],
            [outcome.stop_reason for _candidate, outcome in changed],
            [json.dumps(list(outcome.opened_by)) for _candidate, outcome in changed],
            list(deltas),
            list(deltas.values()),
        ],
        prepared=True,
    )


_LOCK_CLIPS = (
    f"SELECT cl.id FROM {sql.T_CAMPAIGN_CLIP} cl WHERE cl.campaign_id = %s AND cl.clip_id IN"
    f" (SELECT cc.clip_id FROM {sql.T_CANDIDATE} cc WHERE cc.id = ANY(%s::bigint[]))"
    " ORDER BY cl.id FOR UPDATE"
)
# Read once the clip locks are held, so a concurrent submit of the same clip has committed its
# judgments (READ COMMITTED: each statement sees what was committed before it began).
_LOCK_CANDIDATES = (
    "SELECT cc.id, cc.quota, cc.slots_taken, cc.stop_reason, cc.opened_by, cc.metric_score,"
    " cc.metric_uncertainty, cal.standard_errors,"
    f" (SELECT json_agg(j.values) FROM {sql.T_JUDGMENT} j WHERE j.campaign_candidate_id = cc.id"
    f" AND NOT j.is_excluded AND j.source = '{JudgmentSource.CROWD.value}'), cl.id"
    f" FROM {sql.T_CANDIDATE} cc"
    f" JOIN {sql.T_CAMPAIGN_CLIP} cl ON cl.campaign_id = cc.campaign_id AND cl.clip_id = cc.clip_id"
    f" LEFT JOIN {CandidateCalibration._meta.db_table} cal ON cal.campaign_candidate_id = cc.id"
    " WHERE cc.campaign_id = %s AND cc.id = ANY(%s::bigint[]) AND NOT cc.is_control"
    " ORDER BY cc.id FOR UPDATE OF cc"
)
_WRITE = (
    f"WITH changed AS (UPDATE {sql.T_CANDIDATE} x SET quota = d.quota,"
    " stop_reason = d.stop_reason, opened_by = d.opened_by::jsonb"
    " FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::text[])"
    " AS d(id, quota, stop_reason, opened_by) WHERE x.id = d.id RETURNING x.id)"
    f" UPDATE {sql.T_CAMPAIGN_CLIP} x SET open_slots = x.open_slots + e.delta"
    " FROM unnest(%s::bigint[], %s::int[]) AS e(id, delta) WHERE x.id = e.id AND e.delta <> 0"
)


@dataclass(frozen=True)
class _Rules:
    """A campaign's adaptive policy as the decisions use it, built once per call: per question
    without the metric's rule, and the metric's rule alone (None when off)."""

    policy: AdaptivePolicy
    crowd_only: AdaptivePolicy
    metric_only: AdaptivePolicy | None
    questions: tuple[str, ...]
    overall_key: str

    @classmethod
    def of(cls, campaign: Campaign) -> _Rules:
        policy = campaign_policy(campaign)
        assert isinstance(policy, AdaptivePolicy)
        metric_only = None
        if policy.metric_disagreement_threshold is not None:
            metric_only = dataclasses.replace(
                policy, disagreement_range=None, standard_error_threshold=None
            )
        return cls(
            policy=policy,
            crowd_only=dataclasses.replace(policy, metric_disagreement_threshold=None),
            metric_only=metric_only,
            questions=tuple(question["key"] for question in campaign.questions),
            overall_key=campaign.overall_question_key,
        )

    def decide(self, candidate: _Candidate) -> Decision:
        """One candidate's decision: per question from its kept ratings and standard error, plus
        the metric against the crowd's overall rating per judgment (the overall question's, else
        the mean of the judgment's ratings), combined."""
        ratings = candidate.ratings
        decisions = [
            allocation_decide(
                self.crowd_only,
                [values[key] for values in ratings if key in values],
                standard_error=_number(candidate.standard_errors.get(key)),
            )
            for key in self.questions
        ]
        if self.metric_only is not None and candidate.metric_score is not None:
            overall = [self._overall(values) for values in ratings]
            # The policy compares means and ranges only, so a mean rating (a float) serves too.
            decisions.append(
                allocation_decide(
                    self.metric_only,
                    cast("list[int]", [value for value in overall if value is not None]),
                    metric_score=candidate.metric_score,
                    metric_uncertainty=candidate.metric_uncertainty,
                )
            )
        return decisions_combine(decisions)

    def _overall(self, values: Mapping[str, Any]) -> float | None:
        if self.overall_key:
            return values.get(self.overall_key)
        given = [values[key] for key in self.questions if key in values]
        return sum(given) / len(given) if given else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _outcome(*, candidate: _Candidate, decision: Decision, rules: _Rules) -> _Outcome:
    taken = candidate.slots_taken
    if decision.settled:
        assert decision.reason is not None
        return _Outcome(max(taken, 1), decision.reason, candidate.opened_by)
    opened: tuple[str, ...] = candidate.opened_by
    signals: tuple[Signal, ...] = decision.unsettled_by
    opened += tuple(signal for signal in signals if signal not in opened)
    kept = len(candidate.ratings)
    return _Outcome(max(taken, min(rules.policy.maximum, kept + decision.more)), "", opened)
