"""Expert review of the queued candidates (`annotation.quality.review_queue` fills the queue):
claims, resolutions, undo.

Claims are conditional UPDATEs (`WHERE status = 'open'`), so two curators never hold the same
item; `review_claim_next` picks with `select_for_update(skip_locked=True)`.

Every decision writes an `AuditEntry` (who, when, before, after) and can be undone with
`audit_undo`, which applies the entry's "before" and records an undo entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from annotation.models import (
    AuditEntry,
    Campaign,
    CampaignCandidate,
    Judgment,
    ReviewAction,
    ReviewItem,
    ReviewState,
    ReviewStatus,
)
from annotation.quality.aggregation import aggregation_recompute
from annotation.quality.exclusions import (
    EXCLUDED_BY_REVIEW,
    judgments_exclude,
    judgments_include,
    worker_exclude,
    worker_include,
)
from common import webhooks


class ReviewError(Exception):
    """A review action that is not allowed now (claimed by someone else, already undone...).
    `field` names the form input at fault (`rating_<key>`, `reason_<judgment id>`), if any, so a
    page can show the message beside it."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# ----------------------------------------------------------------------------------------------
# Claims
# ----------------------------------------------------------------------------------------------


def _set_candidate_state(item: ReviewItem, state: str) -> None:
    CampaignCandidate.objects.filter(pk=item.campaign_candidate_id).update(review_state=state)


def _hold_audit(
    item: ReviewItem, user: Any, action: str, before: dict[str, object], after: dict[str, object]
) -> None:
    """The audit entry of a claim or a release."""
    AuditEntry.objects.create(
        campaign_id=item.campaign_id,
        review_item=item,
        actor=user,
        action=action,
        target=f"review:{item.pk}",
        before=before,
        after=after,
    )


def review_claim(*, item: ReviewItem, user: Any) -> bool:
    """Claim an open item for `user`; False when someone else holds it or it is resolved.
    Claiming an item one already holds is a no-op that returns True."""
    now = timezone.now()
    with transaction.atomic():
        claimed = ReviewItem.objects.filter(pk=item.pk, status=ReviewStatus.OPEN).update(
            status=ReviewStatus.CLAIMED, claimed_by=user, claimed_at=now
        )
        if not claimed:
            return ReviewItem.objects.filter(
                pk=item.pk, status=ReviewStatus.CLAIMED, claimed_by=user
            ).exists()
        _set_candidate_state(item, ReviewState.CLAIMED)
        _hold_audit(
            item,
            user,
            ReviewAction.CLAIM,
            {"status": ReviewStatus.OPEN},
            {"status": ReviewStatus.CLAIMED, "claimed_by": user.pk},
        )
    item.refresh_from_db()
    return True


def review_claim_next(*, campaign: Campaign, user: Any) -> ReviewItem | None:
    """The item `user` already holds, else the worst open item, claimed for `user`."""
    held = ReviewItem.objects.filter(
        campaign=campaign, status=ReviewStatus.CLAIMED, claimed_by=user
    ).first()
    if held is not None:
        return held
    for _attempt in range(5):
        with transaction.atomic():
            item = (
                ReviewItem.objects.select_for_update(skip_locked=True)
                .filter(campaign=campaign, status=ReviewStatus.OPEN)
                .order_by("-priority", "id")
                .first()
            )
            if item is None:
                return None
            if review_claim(item=item, user=user):
                return item
    return None


def review_release(*, item: ReviewItem, user: Any) -> bool:
    """Give a claimed item back to the queue (only its holder can)."""
    with transaction.atomic():
        released = ReviewItem.objects.filter(
            pk=item.pk, status=ReviewStatus.CLAIMED, claimed_by=user
        ).update(status=ReviewStatus.OPEN, claimed_by=None, claimed_at=None)
        if not released:
            return False
        _set_candidate_state(item, ReviewState.OPEN)
        _hold_audit(
            item,
            user,
            ReviewAction.RELEASE,
            {"status": ReviewStatus.CLAIMED, "claimed_by": user.pk},
            {"status": ReviewStatus.OPEN},
        )
    item.refresh_from_db()
    return True


# ----------------------------------------------------------------------------------------------
# Resolution
# ----------------------------------------------------------------------------------------------


@dataclass
class JudgmentExclusionRequest:
    judgment_id: int
    reason: str


def review_resolve(
    *,
    item: ReviewItem,
    user: Any,
    ratings: dict[str, float] | None = None,
    exclude: Sequence[JudgmentExclusionRequest] = (),
    drop: bool = False,
    note: str = "",
) -> ReviewItem:
    """Resolve a review item: set final ratings (per question, 1..5), exclude specific
    judgments with a reason, and/or drop the candidate from releases. The item must be claimed
    by `user` (an open item is claimed on the way). Each decision is audited separately."""
    campaign = item.campaign
    ratings = _final_ratings(campaign.question_keys, ratings)
    exclude = list(exclude)
    for request in exclude:
        if not request.reason.strip():
            raise ReviewError(
                f"a reason is required to exclude judgment {request.judgment_id}",
                field=f"reason_{request.judgment_id}",
            )
    if not ratings and not exclude and not drop:
        raise ReviewError("nothing to resolve: set ratings, exclude a judgment or drop")
    if item.status == ReviewStatus.OPEN and not review_claim(item=item, user=user):
        raise ReviewError("someone else is reviewing this item")
    touched = {item.campaign_candidate_id}
    with transaction.atomic():
        locked = ReviewItem.objects.select_for_update().get(pk=item.pk)
        if locked.status != ReviewStatus.CLAIMED or locked.claimed_by_id != user.pk:
            raise ReviewError("claim this item before resolving it")
        candidate = CampaignCandidate.objects.select_for_update().get(
            pk=locked.campaign_candidate_id
        )
        decision = _Decision(campaign=campaign, item=locked, user=user, note=note)
        decision.judgments_exclude(candidate, exclude)
        if ratings:
            decision.ratings_set(candidate, ratings)
        if drop and not candidate.dropped:
            decision.candidate_drop(candidate)
        now = timezone.now()
        ReviewItem.objects.filter(pk=locked.pk).update(
            status=ReviewStatus.RESOLVED, resolved_by=user, resolved_at=now
        )
        _set_candidate_state(locked, ReviewState.RESOLVED)
    aggregation_recompute(campaign=campaign, candidate_ids=touched, detect_review=False)
    item.refresh_from_db()
    webhooks.emit("review_item.resolved", {"review_item_id": item.pk, "candidate_id": item.campaign_candidate_id, "dropped": drop}, campaign.pk)  # fmt: skip
    return item


def _final_ratings(keys: Sequence[str], ratings: dict[str, float] | None) -> dict[str, float]:
    """The ratings set (None: not set), each a known question's number between 1 and 5."""
    ratings = {key: value for key, value in (ratings or {}).items() if value is not None}
    for key, value in ratings.items():
        if key not in keys:
            raise ReviewError(f"unknown question {key!r}")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 1 <= value <= 5:
            raise ReviewError(
                f"{key}: a final rating must be between 1 and 5", field=f"rating_{key}"
            )
    return ratings


@dataclass
class _Decision:
    """The decisions of one resolution, each applied and audited (inside its transaction, with
    the review item and the candidate locked)."""

    campaign: Campaign
    item: ReviewItem
    user: Any
    note: str

    def _audit(self, action: str, target: str, before: Any, after: Any, note: str) -> None:
        AuditEntry.objects.create(
            campaign=self.campaign,
            review_item=self.item,
            actor=self.user,
            action=action,
            target=target,
            before=before,
            after=after,
            note=note[:2000],
        )

    def judgments_exclude(
        self, candidate: CampaignCandidate, exclude: list[JudgmentExclusionRequest]
    ) -> None:
        valid_ids = set(
            Judgment.objects.filter(
                campaign_candidate=candidate, id__in=[r.judgment_id for r in exclude]
            ).values_list("id", flat=True)
        )
        for request in exclude:
            if request.judgment_id not in valid_ids:
                raise ReviewError(f"judgment {request.judgment_id} is not on this candidate")
        for request in exclude:
            judgment = Judgment.objects.get(pk=request.judgment_id)
            before = _judgment_state(judgment)
            if judgment.is_excluded:
                continue
            judgments_exclude(
                campaign=self.campaign,
                judgment_ids=[judgment.pk],
                excluded_by=EXCLUDED_BY_REVIEW,
                reason=request.reason.strip(),
                detail={"review_item": self.item.pk, "by": self.user.pk},
            )
            judgment.refresh_from_db()
            self._audit(
                ReviewAction.EXCLUDE_JUDGMENT,
                f"judgment:{judgment.pk}",
                before,
                _judgment_state(judgment),
                request.reason.strip(),
            )

    def ratings_set(self, candidate: CampaignCandidate, ratings: dict[str, float]) -> None:
        before_resolution = candidate.resolution or {}
        after_resolution = {"values": {key: float(value) for key, value in ratings.items()}}
        CampaignCandidate.objects.filter(pk=candidate.pk).update(resolution=after_resolution)
        self._audit(
            ReviewAction.SET_RATINGS,
            f"candidate:{candidate.pk}",
            {"resolution": before_resolution, "means": candidate.means},
            {"resolution": after_resolution},
            self.note,
        )

    def candidate_drop(self, candidate: CampaignCandidate) -> None:
        CampaignCandidate.objects.filter(pk=candidate.pk).update(dropped=True)
        self._audit(
            ReviewAction.DROP,
            f"candidate:{candidate.pk}",
            {"dropped": False},
            {"dropped": True},
            self.note,
        )


class JudgmentState(TypedDict):
    """A judgment's exclusion as an audit entry records it before and after a decision."""

    is_excluded: bool
    excluded_by: str
    exclusion_reason: str


def _judgment_state(judgment: Judgment) -> JudgmentState:
    return {
        "is_excluded": judgment.is_excluded,
        "excluded_by": judgment.excluded_by,
        "exclusion_reason": judgment.exclusion_reason,
    }


# ----------------------------------------------------------------------------------------------
# Undo
# ----------------------------------------------------------------------------------------------

UNDOABLE = {
    ReviewAction.SET_RATINGS,
    ReviewAction.EXCLUDE_JUDGMENT,
    ReviewAction.DROP,
    ReviewAction.EXCLUDE_WORKER,
    ReviewAction.INCLUDE_WORKER,
}
DECISIONS = (ReviewAction.SET_RATINGS, ReviewAction.EXCLUDE_JUDGMENT, ReviewAction.DROP)


def audit_undo(*, entry: AuditEntry, user: Any, note: str = "") -> AuditEntry:
    """Undo one decision: restore its "before" and record an undo entry pointing at it.

    Undoing the last standing decision of a resolved review item puts the item back in the
    queue. A judgment whose slot was refilled meanwhile stays out (see exclusions)."""
    if entry.action not in UNDOABLE:
        raise ReviewError(f"a {entry.get_action_display().lower()} entry cannot be undone")
    campaign = entry.campaign
    touched: set[int] = set()
    with transaction.atomic():
        locked = AuditEntry.objects.select_for_update().get(pk=entry.pk)
        if AuditEntry.objects.filter(undoes=locked).exists():
            raise ReviewError("this decision was already undone")
        result = _restore(locked, campaign=campaign, user=user, note=note, touched=touched)
        try:
            undo = AuditEntry.objects.create(
                campaign=campaign,
                review_item=locked.review_item,
                actor=user,
                action=ReviewAction.UNDO,
                target=locked.target,
                before=locked.after,
                after=result,
                note=note[:2000],
                undoes=locked,
            )
        except IntegrityError as error:  # two curators undid the same entry at once
            raise ReviewError("this decision was already undone") from error
        item = locked.review_item
        if item is not None and item.status == ReviewStatus.RESOLVED:
            _reopen_without_standing_decisions(item)
    if touched:
        aggregation_recompute(campaign=campaign, candidate_ids=touched)
    return undo


def _restore(
    locked: AuditEntry, *, campaign: Campaign, user: Any, note: str, touched: set[int]
) -> dict[str, Any]:
    """Restore what `locked` changed; returns the undo entry's "after" and adds the candidates
    to recompute to `touched`."""
    _kind, _, raw_id = locked.target.partition(":")
    target_id = int(raw_id) if raw_id.isdigit() else None
    if not target_id:
        return {}
    if locked.action == ReviewAction.SET_RATINGS:
        candidate = CampaignCandidate.objects.select_for_update().get(pk=target_id)
        resolution = locked.before.get("resolution") or {}
        CampaignCandidate.objects.filter(pk=candidate.pk).update(resolution=resolution)
        touched.add(candidate.pk)
        return {"resolution": resolution}
    if locked.action == ReviewAction.DROP:
        dropped = bool(locked.before.get("dropped", False))
        CampaignCandidate.objects.filter(pk=target_id).update(dropped=dropped)
        touched.add(target_id)
        return {"dropped": dropped}
    if locked.action == ReviewAction.EXCLUDE_JUDGMENT:
        judgment = Judgment.objects.get(pk=target_id)
        outcome = judgments_include(campaign=campaign, judgment_ids=[judgment.pk])
        judgment.refresh_from_db()
        touched.add(judgment.campaign_candidate_id)
        return {**_judgment_state(judgment), "outcome": outcome}
    if locked.action == ReviewAction.EXCLUDE_WORKER:
        # The curator services recompute the candidates they change themselves.
        participation = campaign.participations.get(pk=target_id)
        inclusion = worker_include(participation=participation, actor=user, note=note)
        return {
            "status": "active",
            "judgments_included": inclusion.judgments_included,
            "judgments_kept_out": inclusion.judgments_kept_out,
        }
    if locked.action == ReviewAction.INCLUDE_WORKER:
        participation = campaign.participations.get(pk=target_id)
        exclusion = worker_exclude(
            participation=participation, actor=user, reason=note or "re-inclusion undone"
        )
        return {"status": "excluded", "judgments_excluded": exclusion.judgments_excluded}
    return {}


def _reopen_without_standing_decisions(item: ReviewItem) -> None:
    """A resolved item whose decisions are all undone goes back to the queue."""
    standing = (
        AuditEntry.objects.filter(review_item=item, action__in=DECISIONS)
        .filter(Q(undone_by__isnull=True))
        .exists()
    )
    if not standing:
        ReviewItem.objects.filter(pk=item.pk).update(
            status=ReviewStatus.OPEN,
            claimed_by=None,
            claimed_at=None,
            resolved_by=None,
            resolved_at=None,
        )
        _set_candidate_state(item, ReviewState.OPEN)
