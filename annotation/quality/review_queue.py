"""The expert review queue: which candidates of a loaded slice wait for an expert.

Queue rule: a candidate (not a control, not dropped) enters the queue when the range of its kept
ratings (max − min) reaches `Campaign.review_range_threshold` (default 3) on any question. Worst
first: priority = range + (mean standard deviation of its ratings) / 10.
An open item whose candidate no longer qualifies (say a worker was excluded) leaves the queue;
claimed and resolved items stay.

Aggregation calls `review_items_sync` (finalisation needs the review state) and review decisions
call aggregation, so this module sits below both: it depends on the loaded slice only, and
`annotation.quality.review` (claims, resolutions, undo) never enters here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from django.db import connection
from django.utils import timezone
from numpy.typing import NDArray

from annotation.crowd.services.columns import copy_to_temp_table
from annotation.models import Campaign, ReviewItem, ReviewState, ReviewStatus
from annotation.quality.loading import CampaignSlice


def current_review_state(data: CampaignSlice) -> NDArray[Any]:
    """The review state of every candidate of `data` from its review item (if any)."""
    state = np.full(len(data.candidates), ReviewState.NONE.value, dtype=object)
    states: dict[str, str] = {
        ReviewStatus.OPEN.value: ReviewState.OPEN.value,
        ReviewStatus.CLAIMED.value: ReviewState.CLAIMED.value,
        ReviewStatus.RESOLVED.value: ReviewState.RESOLVED.value,
    }
    for position, (_, status) in data.review_items.items():
        state[position] = states.get(str(status), ReviewState.NONE.value)
    return state


def review_items_sync(
    *, data: CampaignSlice, rating_range: NDArray[np.float64], spread: NDArray[np.float64]
) -> NDArray[Any]:
    """Bring the queue of a loaded slice up to date from its candidates' rating rating_range and
    spreads (see `annotation.quality.aggregation`); returns the review state per candidate."""
    campaign: Campaign = data.campaign
    threshold = campaign.review_range_threshold
    qualifies = (
        ~data.candidates.is_control
        & ~data.dropped
        & ~np.isnan(rating_range)
        & (np.nan_to_num(rating_range, nan=-1) >= threshold)
    )
    priority = np.nan_to_num(rating_range, nan=0) + np.nan_to_num(spread, nan=0) / 10.0
    existing_status = {position: status for position, (_, status) in data.review_items.items()}
    new_positions = [
        position
        for position in np.flatnonzero(qualifies).tolist()
        if position not in existing_status
    ]
    update_positions = [
        position
        for position in np.flatnonzero(qualifies).tolist()
        if existing_status.get(position) in (ReviewStatus.OPEN, ReviewStatus.CLAIMED)
    ]
    stale_ids = [
        data.review_items[position][0]
        for position, status in existing_status.items()
        if status == ReviewStatus.OPEN and not qualifies[position]
    ]
    ids = data.candidates.ids
    now = timezone.now()
    if new_positions:
        _insert_items(campaign, _QueueRows(ids, rating_range, priority).at(new_positions), now)
    if update_positions:
        _update_items(_QueueRows(ids, rating_range, priority).at(update_positions))
    if stale_ids:
        ReviewItem.objects.filter(id__in=stale_ids, status=ReviewStatus.OPEN).delete()
    state = current_review_state(data)
    for position in new_positions:
        state[position] = ReviewState.OPEN.value
    for position, (review_id, _status) in data.review_items.items():
        if review_id in stale_ids:
            state[position] = ReviewState.NONE.value
    return state


def _insert_items(campaign: Campaign, rows: _QueueRows, now: Any) -> None:
    _review_temp_table(rows)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {ReviewItem._meta.db_table} (campaign_candidate_id, campaign_id, status, "
            f"rating_range, priority, created_at) "
            f"SELECT t.id, %s, %s, t.range, t.priority, %s FROM qc_review AS t "
            f"ON CONFLICT (campaign_candidate_id) DO NOTHING",
            [campaign.pk, ReviewStatus.OPEN, now],
        )


def _update_items(rows: _QueueRows) -> None:
    _review_temp_table(rows)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {ReviewItem._meta.db_table} AS r "
            f"SET rating_range = t.range, priority = t.priority "
            f"FROM qc_review AS t "
            f"WHERE r.campaign_candidate_id = t.id AND r.status IN (%s, %s) "
            f"AND (r.rating_range IS DISTINCT FROM t.range "
            f"OR r.priority IS DISTINCT FROM t.priority)",
            [ReviewStatus.OPEN, ReviewStatus.CLAIMED],
        )


class _QueueRows(NamedTuple):
    """Candidates (CampaignCandidate ids) with their rating range and queue priority."""

    ids: NDArray[np.int64]
    ranges: NDArray[np.float64]
    priority: NDArray[np.float64]

    def at(self, positions: list[int]) -> _QueueRows:
        chosen = np.asarray(positions, dtype=np.int64)
        return _QueueRows(self.ids[chosen], self.ranges[chosen], self.priority[chosen])


def _review_temp_table(rows: _QueueRows) -> None:
    copy_to_temp_table(
        "qc_review",
        [
            ("id", "int8", rows.ids),
            ("range", "int4", rows.ranges.astype(np.int64)),
            ("priority", "float8", rows.priority),
        ],
    )
