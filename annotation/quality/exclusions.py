"""Excluding and re-including judgments and workers, keeping the slot counters right.

Shared with the assignment engine: `CampaignCandidate.slots_taken` = live assignment slots + kept
(not excluded) judgments, never above `quota`; `CampaignClip.open_slots` = the sum over the clip's
candidates of (quota − slots_taken).

- Excluding a kept judgment frees its slot: slots_taken − 1 on the candidate, open_slots + 1 on
  the clip, so the engine hands the candidate out again and it still reaches its quota of *kept*
  judgments.
- Re-including a judgment takes a slot back only while the candidate has room
  (slots_taken < quota). If other workers filled the reopened slot meanwhile, the judgment stays
  excluded with `excluded_by = "quota_refilled"` (and the reason says so): the quota never grows
  and the CHECK constraint `slots_taken <= quota` can never be broken. A curator who wants it back
  anyway excludes one of the newer judgments first.

Locks are taken clip rows first, then candidate rows, each in id order — the order the
assignment engine uses — in short transactions, with the counters changed through F().
Nothing is deleted: an exclusion only flips `Judgment.is_excluded` and records who, why and the
numbers behind it.

A curator's `worker_exclude` / `worker_include` is the whole action: the exclusion or inclusion,
then the recompute of the aggregates and review state of the candidates it changed (pages, API
and undo call it and nothing else). `workers_exclude` (a batch, for QC runs and passes) and the
judgment-level functions leave the recompute to their caller, which folds it into its own.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from annotation.crowd.services.allocation import campaign_allocation_redecide
from annotation.crowd.services.assignment import participation_leases_release
from annotation.crowd.services.columns import json_text, pg_array
from annotation.models import (
    AuditEntry,
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    Participation,
    ParticipationStatus,
    ReviewAction,
    WorkerExclusion,
)
from annotation.quality.aggregation import aggregation_recompute
from annotation.quality.rules import ACTION_EXCLUDE, RULE_LABELS, RuleFlag
from common import webhooks

logger = logging.getLogger(__name__)

EXCLUDED_BY_CURATOR = "curator"
EXCLUDED_BY_REVIEW = "review"
EXCLUDED_BY_QUOTA_REFILLED = "quota_refilled"
EXCLUDED_BY_RULE_PREFIX = "rule:"
# Judgments that arrive from a worker who is already excluded (a lease that was still live).
EXCLUDED_BY_LATE = "worker_excluded"

QUOTA_REFILLED_REASON = (
    "Kept out after re-inclusion: other workers filled this candidate's slots while the judgment "
    "was excluded, so taking it back would exceed the candidate's quota."
)


@dataclass
class ExclusionDecision:
    participation_id: int
    rules: list[str]
    flags: list[RuleFlag] = field(default_factory=list)
    note: str = ""


@dataclass
class ExclusionOutcome:
    exclusions: list[WorkerExclusion]
    judgments_excluded: int
    candidate_ids: set[int]


# ----------------------------------------------------------------------------------------------
# Slots
# ----------------------------------------------------------------------------------------------


def _lock_slots(
    *, campaign: Campaign, candidate_ids: Iterable[int]
) -> dict[int, tuple[int, int, int]]:
    """Lock the clips, then the candidates (id order); {candidate id: (clip, slots, quota)}.
    The ids travel as one array parameter (a QC run frees tens of thousands)."""
    ids = sorted(set(candidate_ids))
    if not ids:
        return {}
    candidate_table = CampaignCandidate._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {CampaignClip._meta.db_table} WHERE campaign_id = %s AND clip_id "
            f"IN (SELECT clip_id FROM {candidate_table} WHERE id = ANY(%s::bigint[])) "
            f"ORDER BY id FOR UPDATE",
            [campaign.pk, pg_array(ids, "int8")],
        )
        cursor.execute(
            f"SELECT id, clip_id, slots_taken, quota FROM {candidate_table} "
            f"WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE",
            [pg_array(ids, "int8")],
        )
        return {row[0]: (row[1], row[2], row[3]) for row in cursor.fetchall()}


def _apply_slot_changes(*, campaign: Campaign, changes: dict[int, tuple[int, int]]) -> None:
    """`changes` = {candidate id: (clip id, delta of slots_taken)}; the clip moves opposite."""
    candidates: list[tuple[int, int]] = []
    clip_delta: Counter[int] = Counter()
    for candidate_id, (clip_id, delta) in changes.items():
        if delta:
            candidates.append((candidate_id, delta))
            clip_delta[clip_id] += delta
    # One statement per table, the deltas as arrays (the rows are locked by `_lock_slots`).
    clips = [(key, delta) for key, delta in clip_delta.items() if delta]
    with connection.cursor() as cursor:
        if candidates:
            cursor.execute(
                f"UPDATE {CampaignCandidate._meta.db_table} AS x "
                f"SET slots_taken = x.slots_taken + d.delta "
                f"FROM unnest(%s::bigint[], %s::int[]) AS d(id, delta) WHERE x.id = d.id",
                _key_delta_arrays(candidates),
            )
        if clips:
            cursor.execute(
                f"UPDATE {CampaignClip._meta.db_table} AS x "
                f"SET open_slots = x.open_slots - d.delta "
                f"FROM unnest(%s::bigint[], %s::int[]) AS d(clip_id, delta) "
                f"WHERE x.campaign_id = %s AND x.clip_id = d.clip_id",
                [*_key_delta_arrays(clips), campaign.pk],
            )


def _key_delta_arrays(pairs: list[tuple[int, int]]) -> list[str]:
    return [pg_array([key for key, _ in pairs], "int8"), pg_array([d for _, d in pairs], "int4")]


def slots_release(*, campaign: Campaign, candidate_counts: dict[int, int]) -> None:
    """Free one slot per newly excluded judgment (call inside the excluding transaction)."""
    locked = _lock_slots(campaign=campaign, candidate_ids=candidate_counts)
    changes: dict[int, tuple[int, int]] = {}
    for candidate_id, count in candidate_counts.items():
        if candidate_id not in locked:
            continue
        clip_id, slots_taken, _quota = locked[candidate_id]
        release = min(count, slots_taken)
        if release < count:
            logger.warning(
                "candidate %s had %s slots taken but %s judgments were excluded",
                candidate_id,
                slots_taken,
                count,
            )
        changes[candidate_id] = (clip_id, -release)
    _apply_slot_changes(campaign=campaign, changes=changes)
    # Adaptive allocation: the kept ratings changed, so the candidates decide again (the clip and
    # candidate rows are locked already, in the engine's order).
    campaign_allocation_redecide(campaign=campaign, campaign_candidate_ids=list(changes))


# ----------------------------------------------------------------------------------------------
# Judgments
# ----------------------------------------------------------------------------------------------


def _exclude_rows(
    *,
    where: str,
    params: Sequence[Any],
    excluded_by: str,
    reason: str,
    detail: dict[str, Any],
    now: Any,
) -> list[int]:
    """Flip kept judgments matching `where` to excluded; returns their candidate ids (one per
    judgment). UPDATE ... RETURNING, so a judgment inserted concurrently is either flipped and
    counted, or left for the next pass — never flipped without freeing its slot."""
    table = Judgment._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET is_excluded = TRUE, excluded_by = %s, exclusion_reason = %s, "
            f"exclusion_detail = %s, excluded_at = %s "
            f"WHERE is_excluded = FALSE AND {where} RETURNING campaign_candidate_id",
            [excluded_by[:50], reason, json_text(detail), now, *params],
        )
        return [row[0] for row in cursor.fetchall()]


def _exclude_for_workers(
    *, rows: Sequence[tuple[int, str, str, dict[str, Any]]], now: Any
) -> list[tuple[int, int]]:
    """Flip every kept judgment of these workers to excluded, each worker with its own
    excluded_by / reason / detail; returns (candidate id, participation id) per judgment.
    One UPDATE whatever the number of workers."""
    if not rows:
        return []
    table = Judgment._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS j SET is_excluded = TRUE, excluded_by = t.excluded_by, "
            f"exclusion_reason = t.reason, exclusion_detail = t.detail, excluded_at = %s "
            f"FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::jsonb[]) "
            f"AS t(participation_id, excluded_by, reason, detail) "
            f"WHERE j.participation_id = t.participation_id AND j.is_excluded = FALSE "
            f"RETURNING j.campaign_candidate_id, j.participation_id",
            [
                now,
                pg_array([row[0] for row in rows], "int8"),
                pg_array([row[1][:50] for row in rows], "text"),
                pg_array([row[2] for row in rows], "text"),
                pg_array([json_text(row[3]) for row in rows], "jsonb"),
            ],
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


def judgments_exclude(
    *,
    campaign: Campaign,
    judgment_ids: Sequence[int],
    excluded_by: str,
    reason: str,
    detail: dict[str, Any] | None = None,
) -> list[int]:
    """Exclude specific kept judgments and free their slots; returns the affected candidate ids
    (call `aggregation_recompute` for them afterwards)."""
    if not judgment_ids:
        return []
    placeholders = ", ".join(["%s"] * len(judgment_ids))
    with transaction.atomic():
        candidate_ids = _exclude_rows(
            where=f"campaign_id = %s AND id IN ({placeholders})",
            params=[campaign.pk, *map(int, judgment_ids)],
            excluded_by=excluded_by,
            reason=reason,
            detail=detail or {},
            now=timezone.now(),
        )
        slots_release(campaign=campaign, candidate_counts=Counter(candidate_ids))
    return candidate_ids


def judgments_include(*, campaign: Campaign, judgment_ids: Sequence[int]) -> dict[str, list[int]]:
    """Re-include excluded judgments where their candidate still has room.

    Returns {"included": [...], "kept_out": [...]} (judgment ids); kept-out judgments are marked
    `quota_refilled` (see the module docstring).
    """
    included: list[int] = []
    kept_out: list[int] = []
    if not judgment_ids:
        return {"included": included, "kept_out": kept_out}
    now = timezone.now()
    with transaction.atomic():
        rows = list(
            Judgment.objects.filter(campaign=campaign, id__in=list(judgment_ids), is_excluded=True)
            .order_by("id")
            .values_list("id", "campaign_candidate_id", "exclusion_detail", "exclusion_reason")
        )
        locked = _lock_slots(campaign=campaign, candidate_ids=[row[1] for row in rows])
        room = {key: quota - slots for key, (_, slots, quota) in locked.items()}
        changes: dict[int, tuple[int, int]] = {}
        for judgment_id, candidate_id, detail, previous_reason in rows:
            if room.get(candidate_id, 0) > 0:
                room[candidate_id] -= 1
                clip_id, delta = changes.get(candidate_id, (locked[candidate_id][0], 0))
                changes[candidate_id] = (clip_id, delta + 1)
                included.append(judgment_id)
            else:
                kept_out.append(judgment_id)
                Judgment.objects.filter(pk=judgment_id).update(
                    excluded_by=EXCLUDED_BY_QUOTA_REFILLED,
                    exclusion_reason=QUOTA_REFILLED_REASON,
                    exclusion_detail={
                        **(detail or {}),
                        "previous_reason": previous_reason,
                        "kept_out_at": now.isoformat(),
                    },
                )
        if included:
            Judgment.objects.filter(id__in=included).update(
                is_excluded=False,
                excluded_by="",
                exclusion_reason="",
                exclusion_detail={},
                excluded_at=None,
            )
        _apply_slot_changes(campaign=campaign, changes=changes)
        campaign_allocation_redecide(campaign=campaign, campaign_candidate_ids=list(changes))
    return {"included": included, "kept_out": kept_out}


# ----------------------------------------------------------------------------------------------
# Workers
# ----------------------------------------------------------------------------------------------


def _explanation(decision: ExclusionDecision) -> str:
    parts = [
        f"{flag.label}: {flag.explanation}"
        for flag in decision.flags
        if flag.rule in decision.rules
    ]
    if decision.note:
        parts.append(decision.note)
    return "; ".join(parts) or ", ".join(RULE_LABELS.get(rule, rule) for rule in decision.rules)


def workers_exclude(
    *,
    campaign: Campaign,
    decisions: Sequence[ExclusionDecision],
    actor: Any = None,
) -> ExclusionOutcome:
    """Exclude workers: their live leases end and return their slots, their kept judgments become
    excluded (rule, reason and numbers kept in the judgment), their slots reopen, their
    participation is excluded (no more assignments; the worker API answers the campaign's
    screen-out from the next request on),
    and a `WorkerExclusion` plus an audit entry record each decision. Workers already excluded
    are skipped. One transaction for the whole batch, a fixed number of statements plus one
    UPDATE per worker, so a QC run that excludes hundreds of workers stays fast."""
    if not decisions:
        return ExclusionOutcome(exclusions=[], judgments_excluded=0, candidate_ids=set())
    actor = actor if getattr(actor, "pk", None) else None
    by_participation = {decision.participation_id: decision for decision in decisions}
    with transaction.atomic():
        locked = list(
            Participation.objects.select_for_update()
            .filter(pk__in=list(by_participation), campaign=campaign)
            .exclude(status=ParticipationStatus.EXCLUDED)
            .order_by("id")
            .values_list("id", "status")
        )
        if not locked:
            return ExclusionOutcome(exclusions=[], judgments_excluded=0, candidate_ids=set())
        # The clips they hold go back to the engine now, not when their leases run out.
        participation_leases_release(participation_ids=[row[0] for row in locked])
        now = timezone.now()
        exclusions = WorkerExclusion.objects.bulk_create(
            [
                _exclusion_row(by_participation[participation_id], actor=actor, now=now)
                for participation_id, _status in locked
            ]
        )
        flipped = _exclude_for_workers(
            rows=[_judgment_exclusion(exclusion, by_participation) for exclusion in exclusions],
            now=now,
        )
        released: Counter[int] = Counter(candidate for candidate, _ in flipped)
        per_worker: Counter[int] = Counter(participation for _, participation in flipped)
        counts: dict[int, int] = {}
        for exclusion in exclusions:
            counts[exclusion.pk] = per_worker[exclusion.participation_id]
            exclusion.judgments_excluded = counts[exclusion.pk]
        slots_release(campaign=campaign, candidate_counts=released)
        Participation.objects.filter(pk__in=[row[0] for row in locked]).update(
            status=ParticipationStatus.EXCLUDED
        )
        WorkerExclusion.objects.bulk_update(exclusions, ["judgments_excluded"], batch_size=1000)
        _exclusions_audit(
            campaign=campaign,
            exclusions=exclusions,
            by_participation=by_participation,
            previous=dict(locked),
            actor=actor,
            now=now,
        )
    webhooks.emit_many(
        "worker.excluded",
        [
            {
                "participation_id": exclusion.participation_id,
                "rules": exclusion.rules,
                "judgments_excluded": counts[exclusion.pk],
            }
            for exclusion in exclusions
        ],
        campaign.pk,
    )
    return ExclusionOutcome(
        exclusions=exclusions,
        judgments_excluded=sum(counts.values()),
        candidate_ids=set(released),
    )


def _exclusion_row(decision: ExclusionDecision, *, actor: Any, now: Any) -> WorkerExclusion:
    return WorkerExclusion(
        participation_id=decision.participation_id,
        rules=list(decision.rules),
        detail={"flags": [flag.as_json() for flag in decision.flags], "note": decision.note},
        created_by=actor,
        created_at=now,
    )


def _judgment_exclusion(
    exclusion: WorkerExclusion, by_participation: dict[int, ExclusionDecision]
) -> tuple[int, str, str, dict[str, Any]]:
    """(participation, excluded_by, reason, detail) for the worker's kept judgments."""
    decision = by_participation[exclusion.participation_id]
    rules = list(decision.rules)
    excluded_by = (
        EXCLUDED_BY_CURATOR
        if rules == [EXCLUDED_BY_CURATOR]
        else EXCLUDED_BY_RULE_PREFIX + ",".join(rules)
    )
    numbers = {flag.rule: flag.numbers for flag in decision.flags}
    return (
        exclusion.participation_id,
        excluded_by,
        _explanation(decision),
        {"exclusion": exclusion.pk, "rules": rules, "numbers": numbers},
    )


def _exclusions_audit(
    *,
    campaign: Campaign,
    exclusions: list[WorkerExclusion],
    by_participation: dict[int, ExclusionDecision],
    previous: dict[int, str],
    actor: Any,
    now: Any,
) -> None:
    AuditEntry.objects.bulk_create(
        [
            AuditEntry(
                campaign=campaign,
                actor=actor,
                action=ReviewAction.EXCLUDE_WORKER,
                target=f"worker:{exclusion.participation_id}",
                before={"status": previous[exclusion.participation_id]},
                after={
                    "status": ParticipationStatus.EXCLUDED,
                    "exclusion": exclusion.pk,
                    "rules": exclusion.rules,
                    "judgments_excluded": exclusion.judgments_excluded,
                },
                note=_explanation(by_participation[exclusion.participation_id])[:2000],
                created_at=now,
            )
            for exclusion in exclusions
        ],
        batch_size=1000,
    )


def worker_exclude(
    *, participation: Participation, actor: Any, reason: str = ""
) -> ExclusionOutcome:
    """A curator excludes a worker by hand (reversible with `worker_include`), then the
    aggregates and review state of the candidates whose judgments it excluded are recomputed."""
    outcome = workers_exclude(
        campaign=participation.campaign,
        decisions=[
            ExclusionDecision(
                participation_id=participation.pk,
                rules=[EXCLUDED_BY_CURATOR],
                flags=[
                    RuleFlag(
                        rule=EXCLUDED_BY_CURATOR,
                        label="Excluded by a curator",
                        action=ACTION_EXCLUDE,
                        explanation=reason or "excluded by a curator",
                        numbers={},
                    )
                ],
            )
        ],
        actor=actor,
    )
    if outcome.candidate_ids:
        aggregation_recompute(campaign=participation.campaign, candidate_ids=outcome.candidate_ids)
    return outcome


@dataclass
class InclusionOutcome:
    judgments_included: int
    judgments_kept_out: int
    candidate_ids: set[int]


def worker_include(*, participation: Participation, actor: Any, note: str = "") -> InclusionOutcome:
    """Reverse a worker's exclusion: the participation is active again (new assignments), the
    judgments excluded with the worker come back where their candidate has room (see the module
    docstring), and the rules will flag but never again exclude this worker automatically. The
    aggregates and review state of the candidates concerned are recomputed afterwards."""
    campaign = participation.campaign
    with transaction.atomic():
        locked = Participation.objects.select_for_update().get(pk=participation.pk)
        previous_status = locked.status
        open_exclusions = list(
            WorkerExclusion.objects.select_for_update().filter(
                participation=locked, reversed_at__isnull=True
            )
        )
        now = timezone.now()
        judgment_ids = list(
            Judgment.objects.filter(participation=locked, is_excluded=True)
            .exclude(excluded_by=EXCLUDED_BY_REVIEW)
            .exclude(excluded_by="")
            .values_list("id", flat=True)
        )
        outcome = judgments_include(campaign=campaign, judgment_ids=judgment_ids)
        Participation.objects.filter(pk=locked.pk).update(status=ParticipationStatus.ACTIVE)
        WorkerExclusion.objects.filter(pk__in=[row.pk for row in open_exclusions]).update(
            reversed_at=now, reversed_by=actor if getattr(actor, "pk", None) else None
        )
        candidate_ids = set(
            Judgment.objects.filter(id__in=judgment_ids).values_list(
                "campaign_candidate_id", flat=True
            )
        )
        AuditEntry.objects.create(
            campaign=campaign,
            actor=actor if getattr(actor, "pk", None) else None,
            action=ReviewAction.INCLUDE_WORKER,
            target=f"worker:{locked.pk}",
            before={"status": previous_status},
            after={
                "status": ParticipationStatus.ACTIVE,
                "reversed_exclusions": [row.pk for row in open_exclusions],
                "judgments_included": len(outcome["included"]),
                "judgments_kept_out": len(outcome["kept_out"]),
            },
            note=note[:2000],
        )
    if candidate_ids:
        aggregation_recompute(campaign=campaign, candidate_ids=candidate_ids)
    return InclusionOutcome(
        judgments_included=len(outcome["included"]),
        judgments_kept_out=len(outcome["kept_out"]),
        candidate_ids=candidate_ids,
    )


def late_judgments_exclude(*, campaign: Campaign, participation_id: int) -> list[int]:
    """Judgments submitted by an already-excluded worker (a lease that was still live when the
    worker was excluded) are excluded too; returns the affected candidate ids."""
    exclusion = (
        WorkerExclusion.objects.filter(participation_id=participation_id, reversed_at__isnull=True)
        .order_by("-created_at")
        .first()
    )
    if exclusion is None:
        return []
    with transaction.atomic():
        locked = Participation.objects.select_for_update().get(pk=participation_id)
        if locked.status != ParticipationStatus.EXCLUDED:
            return []
        candidate_ids = _exclude_rows(
            where="participation_id = %s",
            params=[participation_id],
            excluded_by=EXCLUDED_BY_LATE,
            reason="Submitted after the worker was excluded: "
            + ", ".join(RULE_LABELS.get(rule, rule) for rule in exclusion.rules),
            detail={"exclusion": exclusion.pk, "rules": exclusion.rules},
            now=timezone.now(),
        )
        if candidate_ids:
            slots_release(campaign=campaign, candidate_counts=Counter(candidate_ids))
            WorkerExclusion.objects.filter(pk=exclusion.pk).update(
                judgments_excluded=F("judgments_excluded") + len(candidate_ids)
            )
    return candidate_ids
