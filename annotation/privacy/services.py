"""Erasing a participant (docs/privacy.md): a person's platform ids and free text leave Lepus.

A curator (the worker page, the API, `manage.py erase_participant`), after confirming the person
through the crowd platform's messaging, erases a *person*: the `Worker` row and every
participation of it, in every campaign. A worker (the erase page linked from the end screen, with
their worker token) erases only the participation of that token, in that campaign; the `Worker`
row goes once no participation is left. Per participation, the campaign's `erasure_mode` (stated
in the consent text) decides the ratings:

- `delete`: the participation goes with everything hanging off it (judgments, assignments,
  statistics, exclusions, severities); the slots its kept judgments and live leases held are
  freed, so the candidates are handed out again and still reach their quota of kept judgments.
- `pseudonymise`: the judgments stay, with their reasons blanked, under a new `Worker` of
  platform `erased` whose id is random (one per participation: two campaigns' pseudonyms are not
  linkable); the token stops working and the participation gets no new work.

Either way the campaign keeps a keyed hash of the person (`annotation.crowd.services.barring`): an
excluded person stays excluded, and nobody erased joins that campaign again to rate its clips a
second time. The platform id (`Worker.external_id`), the platform's study/session/assignment ids
(`Participation.platform_data`) and every free-text reason are gone, and occurrences of the id in
curators' audit notes are replaced by "[erased]". The aggregates and review queue of the
candidates concerned are recomputed, and one audit entry per campaign records that a participant
was erased, how and by whom — never who. Releases already published are files in storage and are
not rewritten (their worker ids are keyed pseudonyms, export/records.py); the next release is
built from the database as it is after the erasure.
"""

from __future__ import annotations

import secrets
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet, Value
from django.db.models.functions import Replace

from annotation.crowd.services.assignment import participation_leases_return
from annotation.crowd.services.barring import barred_identity_record
from annotation.crowd.services.workers import external_id_normalize
from annotation.models import (
    Assignment,
    AuditEntry,
    BarReason,
    CalibrationRun,
    Campaign,
    ErasureMode,
    Judgment,
    Participation,
    ParticipationStatus,
    Platform,
    QCRun,
    ReviewAction,
    Worker,
    WorkerExclusion,
    WorkerQCStats,
)
from annotation.quality.aggregation import aggregation_recompute
from annotation.quality.exclusions import slots_release
from common import webhooks

REQUESTERS = ("worker", "curator", "command")
# Shorter ids are not searched for in curators' notes (they would match ordinary words).
NOTE_SCRUB_MIN_CHARS = 6
ERASED = "[erased]"


class ErasureRefused(Exception):
    """Imported rater slots are not people and cannot be erased."""


@dataclass
class ErasureOutcome:
    """What an erasure did, in counts (the figures the API, page and command report)."""

    mode_by_campaign: dict[str, str] = field(default_factory=dict)
    participations: int = 0
    judgments_deleted: int = 0
    judgments_pseudonymised: int = 0
    reasons_erased: int = 0
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "erased": not self.dry_run,
            "dry_run": self.dry_run,
            "participations": self.participations,
            "campaigns": dict(sorted(self.mode_by_campaign.items())),
            "judgments_deleted": self.judgments_deleted,
            "judgments_pseudonymised": self.judgments_pseudonymised,
            "reasons_erased": self.reasons_erased,
        }


def _pseudonym_worker() -> Worker:
    return Worker.objects.create(
        platform=Platform.ERASED, external_id=f"erased-{secrets.token_hex(12)}"
    )


def _erase_delete(participation: Participation, campaign: Campaign) -> tuple[int, int, set[int]]:
    """Delete one participation; returns (judgments deleted, reasons among them, candidates)."""
    judgments = list(
        Judgment.objects.filter(participation=participation).values_list(
            "campaign_candidate_id", "is_excluded", "reason"
        )
    )
    kept = Counter(candidate for candidate, excluded, _reason in judgments if not excluded)
    if kept:
        slots_release(campaign=campaign, candidate_counts=dict(kept))
    participation.delete()  # cascades: judgments, assignments, statistics, exclusions
    reasons = sum(1 for _candidate, _excluded, reason in judgments if reason)
    return len(judgments), reasons, {candidate for candidate, _e, _r in judgments}


def _erase_pseudonymise(
    participation: Participation, external_id: str
) -> tuple[int, int, set[int]]:
    """Move one participation to a fresh pseudonym; returns (judgments kept, reasons blanked,
    candidates)."""
    _scrub_rows(WorkerQCStats.objects.filter(participation=participation), "flags", external_id)
    _scrub_rows(WorkerExclusion.objects.filter(participation=participation), "detail", external_id)
    judgments = Judgment.objects.filter(participation=participation)
    candidates = set(judgments.values_list("campaign_candidate_id", flat=True))
    count = judgments.count()
    reasons = judgments.exclude(reason="").update(reason="")
    if len(external_id) >= NOTE_SCRUB_MIN_CHARS:  # a curator's exclusion reason may name them
        judgments.filter(exclusion_reason__contains=external_id).update(
            exclusion_reason=Replace(F("exclusion_reason"), Value(external_id), Value(ERASED))
        )
    # The digest is a hash of the submitted body, reasons included.
    Assignment.objects.filter(participation=participation).update(submission_digest="")
    Participation.objects.filter(pk=participation.pk).update(
        worker=_pseudonym_worker(),
        platform_data={},
        token_hash=None,
        status=(
            ParticipationStatus.PAUSED
            if participation.status == ParticipationStatus.ACTIVE
            else participation.status
        ),
    )
    return count, reasons, candidates


def participant_erase(
    *,
    worker: Worker,
    actor: Any = None,
    requested_by: str,
    dry_run: bool = False,
    only_participation_id: int | None = None,
) -> ErasureOutcome:
    """Erase `worker` (a person) everywhere; see the module docstring. `requested_by` is one of
    `REQUESTERS` and goes into the audit entries; `dry_run` counts without changing anything.
    `only_participation_id`: erase that one participation only (a worker's own request, see
    `participation_erase_own`); the `Worker` row goes only when no participation is left."""
    if requested_by not in REQUESTERS:
        raise ValueError(f"requested_by must be one of {REQUESTERS}")
    if worker.platform == Platform.IMPORTED:
        raise ErasureRefused("Imported rater slots are not people and cannot be erased.")
    outcome = ErasureOutcome(dry_run=dry_run)
    touched: dict[int, set[int]] = defaultdict(set)
    campaigns: dict[int, Campaign] = {}
    with transaction.atomic():
        locked = Worker.objects.select_for_update().filter(pk=worker.pk).first()
        if locked is None:  # erased meanwhile (a second click): nothing is left to erase
            return outcome
        participations = list(
            Participation.objects.select_for_update()
            .select_related("campaign")
            .filter(worker=locked)
            .order_by("id")
        )
        if only_participation_id is not None:
            participations = [p for p in participations if p.pk == only_participation_id]
        for participation in participations:
            campaign = participation.campaign
            campaigns[campaign.pk] = campaign
            outcome.mode_by_campaign[campaign.slug] = campaign.erasure_mode
            outcome.participations += 1
            if dry_run:
                _erasure_count(participation, campaign, outcome)
                continue
            touched[campaign.pk] |= _participation_erase(
                participation,
                worker=locked,
                actor=actor,
                requested_by=requested_by,
                outcome=outcome,
            )
        if not dry_run and not Participation.objects.filter(worker=locked).exists():
            locked.delete()
    for campaign_id, candidate_ids in touched.items():
        if candidate_ids:
            aggregation_recompute(campaign=campaigns[campaign_id], candidate_ids=candidate_ids)
    return outcome


def _erasure_count(
    participation: Participation, campaign: Campaign, outcome: ErasureOutcome
) -> None:
    """A dry run: count what erasing the participation would delete or pseudonymise."""
    judgments = Judgment.objects.filter(participation=participation)
    if campaign.erasure_mode == ErasureMode.PSEUDONYMISE:
        outcome.judgments_pseudonymised += judgments.count()
    else:
        outcome.judgments_deleted += judgments.count()
    outcome.reasons_erased += judgments.exclude(reason="").count()


def _participation_erase(
    participation: Participation,
    *,
    worker: Worker,
    actor: Any,
    requested_by: str,
    outcome: ErasureOutcome,
) -> set[int]:
    """Erase one participation of the locked `worker` by its campaign's mode, audit it and tell
    the webhooks; returns the campaign candidates whose aggregates must be recomputed."""
    campaign = participation.campaign
    external_id = worker.external_id
    # Before the id goes: the person may not join this campaign again (an exclusion
    # must outlive the erasure, and nobody may rate a clip twice).
    barred_identity_record(
        campaign=campaign,
        platform=worker.platform,
        external_id=external_id,
        reason=(
            BarReason.EXCLUDED
            if participation.status == ParticipationStatus.EXCLUDED
            else BarReason.ERASED
        ),
    )
    participation_leases_return(participation=participation)
    after: dict[str, int]
    if campaign.erasure_mode == ErasureMode.PSEUDONYMISE:
        count, reasons, candidates = _erase_pseudonymise(participation, external_id)
        outcome.judgments_pseudonymised += count
        after = {"judgments_kept_under_pseudonym": count}
    else:
        count, reasons, candidates = _erase_delete(participation, campaign)
        outcome.judgments_deleted += count
        after = {"judgments_deleted": count}
    outcome.reasons_erased += reasons
    _scrub_notes(campaign, external_id)
    AuditEntry.objects.create(
        campaign=campaign,
        actor=actor if getattr(actor, "pk", None) else None,
        action=ReviewAction.ERASE_PARTICIPANT,
        target=f"worker:{participation.pk}",
        after={
            "mode": campaign.erasure_mode,
            "requested_by": requested_by,
            "reasons_erased": reasons,
            **after,
        },
    )
    webhooks.emit(
        "participant.erased",
        {"mode": campaign.erasure_mode, "requested_by": requested_by, **after},
        campaign.pk,
    )
    return candidates


def _scrub_notes(campaign: Campaign, external_id: str) -> None:
    """Where the campaign's records name the worker by platform id, replace it by "[erased]": QC
    run summaries (their lists of excluded workers) and curators' audit notes."""
    _scrub_rows(QCRun.objects.filter(campaign=campaign), "summary", external_id)
    _scrub_rows(CalibrationRun.objects.filter(campaign=campaign), "summary", external_id)
    for column in ("before", "after"):
        _scrub_rows(AuditEntry.objects.filter(campaign=campaign), column, external_id)
    if len(external_id) >= NOTE_SCRUB_MIN_CHARS:
        AuditEntry.objects.filter(campaign=campaign, note__contains=external_id).update(
            note=Replace(F("note"), Value(external_id), Value(ERASED))
        )


def _scrub_rows(rows: QuerySet[Any], column: str, external_id: str) -> None:
    """Rewrite the JSON `column` of the rows that name `external_id` (few: runs, decisions)."""
    for pk, value in rows.values_list("pk", column):
        scrubbed = scrub(value, external_id)
        if scrubbed != value:
            rows.model.objects.filter(pk=pk).update(**{column: scrubbed})


def scrub(value: Any, external_id: str) -> Any:
    """`value` (JSON) with `external_id` replaced wherever a string equals it, or contains it
    (ids shorter than `NOTE_SCRUB_MIN_CHARS` only where a string equals it)."""
    if isinstance(value, str):
        if value == external_id:
            return ERASED
        if len(external_id) >= NOTE_SCRUB_MIN_CHARS and external_id in value:
            return value.replace(external_id, ERASED)
        return value
    if isinstance(value, list):
        return [scrub(item, external_id) for item in value]
    if isinstance(value, dict):
        return {key: scrub(item, external_id) for key, item in value.items()}
    return value


def participation_erase(
    *, participation: Participation, actor: Any = None, requested_by: str, dry_run: bool = False
) -> ErasureOutcome:
    """Erase the person behind `participation` everywhere (a curator's worker page or API, once
    the curator has confirmed the person through the platform's messaging)."""
    return participant_erase(
        worker=participation.worker, actor=actor, requested_by=requested_by, dry_run=dry_run
    )


def participation_erase_own(*, participation: Participation) -> ErasureOutcome:
    """A worker's own request with their worker token: only what that token's session created,
    that is this one participation in this one campaign. Whoever holds a token proved no more
    than holding it (docs/crowd-flow.md, "Who a worker is"), so it never reaches the person's
    other campaigns; the person asks the researchers for those."""
    return participant_erase(
        worker=participation.worker,
        requested_by="worker",
        only_participation_id=participation.pk,
    )


def participant_erase_by_reference(
    *,
    participation_id: int | None = None,
    platform: str | None = None,
    external_id: str | None = None,
    requested_by: str,
    dry_run: bool = False,
) -> ErasureOutcome:
    """Erase the person named by a participation id, or by a platform id (normalised as at
    joining: what a person writing in to ask for erasure quotes); the command's entry point."""
    if participation_id is not None:
        participation = (
            Participation.objects.select_related("worker").filter(pk=participation_id).first()
        )
        if participation is None:
            raise ErasureRefused(f"no participation {participation_id}")
        worker = participation.worker
    elif platform and external_id:
        normalised = external_id_normalize(platform=platform, external_id=external_id)
        found = Worker.objects.filter(platform=platform, external_id=normalised).first()
        if found is None:
            raise ErasureRefused("no participant with that platform id")
        worker = found
    else:
        raise ErasureRefused("name a participation id, or a platform and a platform id")
    return participant_erase(worker=worker, requested_by=requested_by, dry_run=dry_run)
