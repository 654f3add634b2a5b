"""The quality passes between full runs: after crowd submissions and the periodic sweep.

- `quality_catch_up(campaign_id=...)`: the debounced after-submission pass (task
  `annotation.quality_catch_up`, published by `annotation.crowd.debouncing`): every worker who
  submitted since their statistics were computed, in one pass.
- `quality_catch_up_active()`: that pass over every active crowd campaign (beat, every 10 s).
- `quality_after_submission(assignment_id=...)`: one submission at a time (task
  `annotation.after_submission`, when debouncing is off).
- `quality_sweep()`: periodic catch-up (task `annotation.quality_sweep`, beat every 5 minutes) for
  work that could not be published while the broker was down.

Each pass starts from the workers' running statistics (`WorkerQCStats.running_*`,
`annotation.quality.running`) and reads only their judgments on the clips of their new
judgments (those above their watermark, `WorkerQCStats.through_judgment_id`) and, for the
leave-one-out mean, one row per candidate with the sums and counts of its kept ratings
(`candidate_sums_load`: stored by the last aggregation, summed by PostgreSQL for the candidates
of the new judgments); evaluates those workers' statistics and rules and excludes where the
rules say so. It then recomputes the aggregates and review state of only those candidates
whose judgments changed since they were last aggregated (judgments submitted since, and
exclusions), which moves the agreement moments of every state holding a judgment on them
(`running_store.agreement_push`). A worker without a state, or whose judgments up to the
watermark changed, is read in full, and so are all the pass's workers when its first round of
rules excludes one. The sorted values behind the two medians stay in PostgreSQL: the pass sends
the values it takes out and puts in and reads back the two middle values
(`median_values_read`), and merges them when it stores (`median_values_write`), both through
`lepus_sorted_merge` (migration 0020: binary search and slices, no re-sort). What still grows
with a worker's history: in Python and on the wire, nothing; in PostgreSQL, the watermark check
(a count of their judgments up to it) and copying the sorted arrays' bytes. Measured in docs/benchmarks.md, "The after-submission quality pass against history" and
"Quality pass, stop 38".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import Count, F, Max, Q
from django.utils import timezone
from numpy.typing import NDArray

from annotation.models import (
    Assignment,
    AssignmentStatus,
    Campaign,
    CampaignCandidate,
    CampaignStatus,
    Judgment,
    Participation,
    ParticipationStatus,
)
from annotation.quality.aggregation import aggregation_recompute
from annotation.quality.candidate_sums import candidate_sums_load
from annotation.quality.evaluation import (
    IncompleteSlice,
    judgments_seen,
    worker_stats_store,
    workers_evaluate,
)
from annotation.quality.exclusions import late_judgments_exclude, workers_exclude
from annotation.quality.loading import CampaignSlice, campaign_median_seconds, campaign_slice_load
from annotation.quality.rules import RuleFlag, qc_rules_merge
from annotation.quality.running import (
    RunningState,
    empty_state,
    state_add,
    state_subtract,
    statistics_from_state,
)
from annotation.quality.running_store import (
    median_values_read,
    median_values_write,
    running_states_load,
    running_states_write,
    slice_state,
    stored_sums_read,
)
from annotation.quality.statistics import ReferenceSums, WorkerStatistics

logger = logging.getLogger(__name__)


def workers_quality_update(
    *, campaign: Campaign, participation_ids: Iterable[int], aggregate: bool = True
) -> set[int]:
    """Statistics and rules of some workers, from their running statistics
    (`WorkerQCStats.running_*`) and their judgments on the clips of their new judgments (those
    above their watermark); a worker without a state, or whose judgments up to the watermark
    are no longer as many (all, kept) as the state holds, is read in full, and so is everyone
    when the first round of rules excludes someone, or without `aggregate` (the sweep). The
    leave-one-out agreement uses one row of sums per candidate (`candidate_sums_load`: summed
    by the database for the candidates of new judgments, stored by the last aggregation for the
    others). Then the aggregates and review state of those of the candidates whose judgments
    changed since they were last aggregated (new judgments, and this pass's exclusions), which
    moves the agreement moments of the other raters' states (`running_store.agreement_push`).
    Returns the candidates whose judgments an exclusion changed.

    The statistics and states are stored last: if aggregation fails, the workers stay stale
    and the next pass does it all again."""
    targets = sorted({int(value) for value in participation_ids})
    if not targets:
        return set()
    read_at = timezone.now()
    # Without the sorted median values: they stay in the database (`median_values_read`).
    stored, present, marks = running_states_load(targets, medians=False)
    trusted = present & watermarks_hold(campaign, targets, marks)
    try:
        return _pass(
            campaign, targets, trusted, stored, marks, read_at, aggregate=aggregate, complete=False
        )
    except IncompleteSlice:
        return _pass(
            campaign, targets, trusted, stored, marks, read_at, aggregate=aggregate, complete=True
        )


def _pass(
    campaign: Campaign,
    targets: list[int],
    trusted: NDArray[np.bool_],
    stored: RunningState,
    marks: NDArray[np.int64],
    read_at: Any,
    *,
    aggregate: bool,
    complete: bool,
) -> set[int]:
    """One pass. `complete`: read every judgment of the targets and rebuild their states;
    else only their judgments on the clips of their new ones (above the watermark of the
    `trusted`; all of the others'). Either way the candidates summed from the judgments are
    those of the new judgments."""
    through = np.where(trusted, marks[:, 0], -1)
    complete = complete or not aggregate or not trusted.any()
    data = campaign_slice_load(
        campaign=campaign,
        candidate_ids=_touched_clip_candidates(
            campaign, targets, np.full(len(targets), -1) if complete else through
        ),
        judges=targets,
    )
    positions = np.searchsorted(data.workers.ids, np.asarray(targets, dtype=np.int64))
    judgments = data.judgments
    watermark = np.full(len(data.workers), -1, dtype=np.int64)
    watermark[positions] = through
    new = judgments.ids > watermark[judgments.worker]
    live = np.zeros(len(data.candidates), dtype=bool)
    live[judgments.item[new]] = True
    counts = candidate_sums_load(
        campaign=campaign,
        candidate_ids=data.candidates.ids,
        question_keys=data.question_keys,
        live=live if aggregate else None,
    )
    campaign_median = campaign_median_seconds(
        campaign=campaign, excluding_participation_ids=targets
    )
    statistics = None
    if not complete:
        statistics = _running_statistics(
            data, targets, trusted, stored, positions, new, counts.sums, campaign_median
        )
    statistics, flags, decisions = workers_evaluate(
        data,
        rules=qc_rules_merge(campaign.qc_rules),
        campaign_median=campaign_median,
        targets=positions,
        agreement_sums=counts.sums,
        # From a complete slice workers_evaluate computes them (the same figures), and its
        # second round can take leaving workers out.
        statistics=statistics,
    )
    outcome = workers_exclude(campaign=campaign, decisions=decisions)
    if aggregate:
        # And the candidates summed because their stored sums were unusable (aggregated before
        # 0018): stored now, so that the states, kept against stored sums, count them.
        changed = (
            (counts.total != data.stored_total) | (counts.kept != data.stored_kept) | counts.live
        )
        changed_ids = set(data.candidates.ids[changed].tolist()) | outcome.candidate_ids
        if changed_ids:
            aggregation_recompute(campaign=campaign, candidate_ids=changed_ids)
    excluded = {exclusion.participation_id for exclusion in outcome.exclusions}
    partial = trusted & (not complete)
    _store(data, statistics, flags, positions, partial, marks, new, excluded, read_at)
    return set(outcome.candidate_ids)


def _running_statistics(
    data: CampaignSlice,
    targets: list[int],
    trusted: NDArray[np.bool_],
    stored: RunningState,
    positions: NDArray[np.int64],
    new: NDArray[np.bool_],
    sums: Any,
    campaign_median: float | None,
) -> WorkerStatistics:
    """The targets' statistics from their stored states moved by the slice's new judgments
    (against the candidates' stored sums before and `sums` now); the trusted targets' median
    values moved in the database and read back (`median_values_read`)."""
    before = stored_sums_read(
        campaign=data.campaign, candidate_ids=data.candidates.ids, questions=len(data.question_keys)
    )
    base = _placed(stored, positions, trusted, len(data.workers))
    removed, added = _changes(data, new, old_sums=before, new_sums=sums)
    evaluated = _updated(base, removed, added)
    rows = np.flatnonzero(trusted)
    slots = positions[rows]
    timing, ratios = median_values_read(
        [targets[row] for row in rows.tolist()],
        removed=removed.take(slots),
        added=added.take(slots),
    )
    for slot, timing_values, ratio_values in zip(slots.tolist(), timing, ratios, strict=True):
        evaluated.timing_ms[slot] = np.asarray(timing_values, dtype=np.int64)
        evaluated.clip_ratios[slot] = np.asarray(ratio_values, dtype=np.float64)
    return statistics_from_state(evaluated, campaign_median_seconds=campaign_median)


def _placed(
    stored: RunningState, positions: NDArray[np.int64], trusted: NDArray[np.bool_], workers: int
) -> RunningState:
    """The stored states of the trusted targets at their slice positions; zero elsewhere."""
    state = empty_state(workers)
    state.agreement = np.zeros((workers, stored.agreement.shape[1], 3), dtype=np.int64)
    for row in np.flatnonzero(trusted).tolist():
        index = int(positions[row])
        state.counts[index] = stored.counts[row]
        state.agreement[index] = stored.agreement[row]
        state.timing_ms[index] = stored.timing_ms[row]
        state.clip_ratios[index] = stored.clip_ratios[row]
    return state


def _changes(
    data: CampaignSlice, new: NDArray[np.bool_], *, old_sums: ReferenceSums, new_sums: ReferenceSums
) -> tuple[RunningState, RunningState]:
    """What a pass takes out of the stored states (the slice's old judgments, against
    `old_sums`, the sums the states were kept against) and puts in (all of the slice's
    judgments, against `new_sums`): the slice holds whole (worker, clip) groups, so the groups
    of the new judgments are replaced whole."""
    kept = ~data.judgments.excluded
    return (
        slice_state(data, ~new, old_sums, kept),
        slice_state(data, new | ~new, new_sums, kept),
    )


def _updated(base: RunningState, removed: RunningState, added: RunningState) -> RunningState:
    """`base` (the states of the judgments not new) less `removed` plus `added`, but the sorted
    median values: `added`'s, which are all of a worker's where the slice holds all their
    judgments; a stored state's are moved in the database (`median_values_read` / `_write`)."""
    moved = state_add(state_subtract(base, removed, medians=False), added, medians=False)
    moved.timing_ms = list(added.timing_ms)
    moved.clip_ratios = list(added.clip_ratios)
    return moved


def _store(
    data: CampaignSlice,
    statistics: WorkerStatistics,
    flags: dict[int, list[RuleFlag]],
    positions: NDArray[np.int64],
    trusted: NDArray[np.bool_],
    marks: NDArray[np.int64],
    new: NDArray[np.bool_],
    excluded: set[int],
    read_at: Any,
) -> None:
    """Statistics, watermarks and states of the targets, in one transaction: the slice's
    candidates' sums read `FOR SHARE` (aggregation cannot move them meanwhile), the targets'
    states re-read under lock (aggregation may have pushed into them since the pass read them),
    then the slice's judgments swapped in against those sums. A target whose watermark moved
    meanwhile (another pass) or whom this pass excluded gets no state: their next pass reads
    everything."""
    targets = data.workers.ids[positions].tolist()
    judgments = data.judgments
    seen = judgments_seen(data, positions.tolist())
    new_count = np.bincount(judgments.worker[new], minlength=len(data.workers))[positions]
    new_kept = np.bincount(
        judgments.worker[new & ~judgments.excluded], minlength=len(data.workers)
    )[positions]
    rows = np.flatnonzero(trusted)
    seen[rows, 0] = np.maximum(seen[rows, 0], marks[rows, 0])
    seen[rows, 1] = marks[rows, 1] + new_count[rows]
    seen[rows, 2] = marks[rows, 2] + new_kept[rows]
    with transaction.atomic():
        after = stored_sums_read(
            campaign=data.campaign,
            candidate_ids=data.candidates.ids,
            questions=len(data.question_keys),
            lock="SHARE",
        )
        now, present, now_marks = running_states_load(targets, lock=True, medians=False)
        holding = trusted & present & (now_marks == marks).all(axis=1)
        base = _placed(now, positions, holding, len(data.workers))
        # Untrusted targets have every judgment `new` (watermark -1) in the slice.
        swapped = np.where(holding, marks[:, 0], -1)
        watermark = np.full(len(data.workers), -1, dtype=np.int64)
        watermark[positions] = swapped
        removed, added = _changes(
            data, judgments.ids > watermark[judgments.worker], old_sums=after, new_sums=after
        )
        worker_stats_store(
            data,
            statistics,
            flags,
            indices=positions.tolist(),
            computed_at=read_at,
            seen=seen,
            running=_updated(base, removed, added).take(positions),
            running_medians=False,
        )
        median_values_write(
            targets,
            removed=removed.take(positions),
            added=added.take(positions),
            replace=(~holding).tolist(),
        )
        cleared = [
            pid
            for row, pid in enumerate(targets)
            if pid in excluded or (trusted[row] and not holding[row])
        ]
        running_states_write(cleared, None)


def watermarks_hold(
    campaign: Campaign, targets: list[int], marks: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Per target (rows of `marks`: through id, judgments and kept ones up to it): whether their
    judgments up to the watermark are still as many, all and kept. A judgment committed after
    the read with a smaller id, one erased, excluded or re-included, makes it fail. This counts
    the worker's judgments up to the watermark: an index range and their rows' exclusion flag
    (the one read that still grows with the history)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT w.pid, COUNT(j.id), COUNT(j.id) FILTER (WHERE NOT j.is_excluded) "
            f"FROM unnest(%s::bigint[], %s::bigint[]) AS w(pid, through) "
            f"LEFT JOIN {Judgment._meta.db_table} j ON j.campaign_id = %s "
            f"AND j.participation_id = w.pid AND j.id <= w.through GROUP BY w.pid",
            [targets, marks[:, 0].tolist(), campaign.pk],
        )
        found = {int(pid): (int(counted), int(kept)) for pid, counted, kept in cursor.fetchall()}
    return np.asarray(
        [
            marks[row, 0] >= 0 and found.get(pid) == (int(marks[row, 1]), int(marks[row, 2]))
            for row, pid in enumerate(targets)
        ],
        dtype=bool,
    )


def _touched_clip_candidates(
    campaign: Campaign, targets: list[int], through: NDArray[np.int64]
) -> list[int]:
    """Every candidate of the clips on which a target has a judgment above `through` (their
    watermark, -1: all): the new judgments' (worker, clip) groups, whole. A range of the
    (campaign, participation, id) index per worker."""
    candidate_table = CampaignCandidate._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT cc.id FROM {candidate_table} cc WHERE cc.campaign_id = %s AND cc.clip_id IN ("
            f"SELECT touched.clip_id FROM {candidate_table} touched WHERE touched.id IN ("
            f"SELECT j.campaign_candidate_id FROM unnest(%s::bigint[], %s::bigint[]) "
            f"AS w(pid, through) JOIN {Judgment._meta.db_table} j ON j.campaign_id = %s "
            f"AND j.participation_id = w.pid AND j.id > w.through))",
            [campaign.pk, targets, through.tolist(), campaign.pk],
        )
        return [int(row[0]) for row in cursor.fetchall()]


def quality_after_submission(*, assignment_id: int) -> None:
    """Incremental QC after a crowd submission: the worker's statistics and rules, then the
    aggregates and review state of the candidates whose judgments changed (the submitted ones
    included). One read of those candidates serves both unless an exclusion intervened."""
    assignment = (
        Assignment.objects.select_related("campaign", "participation")
        .filter(pk=assignment_id)
        .first()
    )
    if assignment is None or assignment.status != AssignmentStatus.SUBMITTED:
        return
    campaign = assignment.campaign
    participation = assignment.participation
    if participation.status == ParticipationStatus.EXCLUDED:
        late = late_judgments_exclude(campaign=campaign, participation_id=participation.pk)
        if late:
            aggregation_recompute(campaign=campaign, candidate_ids=set(late))
        return
    workers_quality_update(campaign=campaign, participation_ids=[participation.pk])


SWEEP_MAX_WORKERS = 500


def quality_catch_up_active() -> int:
    """`quality_catch_up` of every active crowd campaign (cheap where nobody is stale: two
    indexed queries); returns the workers updated."""
    updated = 0
    campaigns = Campaign.objects.filter(
        status=CampaignStatus.ACTIVE, is_imported=False
    ).values_list("id", flat=True)
    for campaign_id in campaigns:
        try:
            updated += quality_catch_up(campaign_id=campaign_id)["workers"]
        except Exception:  # one broken campaign must not stop the others
            logger.exception("quality pass of campaign %s failed", campaign_id)
    return updated


def late_judgments_exclude_all(*, campaign: Campaign) -> set[int]:
    """Exclude the still-kept judgments of every excluded worker of the campaign (stored after
    their exclusion, by a lease that was live); returns the candidates whose judgments changed."""
    touched: set[int] = set()
    late_workers = (
        Participation.objects.filter(
            campaign=campaign, status=ParticipationStatus.EXCLUDED, judgments__is_excluded=False
        )
        .values_list("id", flat=True)
        .distinct()
    )
    for participation_id in late_workers:
        touched |= set(late_judgments_exclude(campaign=campaign, participation_id=participation_id))
    return touched


def quality_catch_up(*, campaign_id: int) -> dict[str, int]:
    """The debounced after-submission pass (task `annotation.quality_catch_up`, see
    `annotation.crowd.debouncing`): every worker of the campaign who submitted since their
    statistics were computed, in one pass, then the aggregates and review state of the candidates
    whose judgments changed; judgments that excluded workers stored late are excluded too."""
    campaign = Campaign.objects.filter(pk=campaign_id, is_imported=False).first()
    if campaign is None:
        return {"workers": 0, "candidates": 0}
    touched = late_judgments_exclude_all(campaign=campaign)
    if touched:
        aggregation_recompute(campaign=campaign, candidate_ids=touched)
    # `last_seen_at` moves with every submit (and every `next`): a superset of the stale workers,
    # found without reading their judgments.
    stale_ids = list(
        Participation.objects.filter(
            campaign=campaign, status=ParticipationStatus.ACTIVE, assignments_submitted__gt=0
        )
        .filter(Q(qc_stats__isnull=True) | Q(last_seen_at__gt=F("qc_stats__computed_at")))
        .values_list("id", flat=True)[:SWEEP_MAX_WORKERS]
    )
    if stale_ids:
        workers_quality_update(campaign=campaign, participation_ids=stale_ids)
    return {"workers": len(stale_ids), "candidates": len(touched)}


def quality_sweep() -> None:
    """Catch up on quality work that was missed (a broker outage, a crashed worker): workers
    whose statistics are older than their last judgment, judgments of excluded workers that are
    still kept, and candidates whose stored counts no longer match their judgments."""
    campaigns = Campaign.objects.filter(
        status__in=(CampaignStatus.ACTIVE, CampaignStatus.PAUSED), is_imported=False
    )
    for campaign in campaigns:
        try:
            quality_sweep_campaign(campaign=campaign)
        except Exception:  # one broken campaign must not stop the others
            logger.exception("quality sweep of campaign %s failed", campaign.slug)


def quality_sweep_campaign(*, campaign: Campaign) -> dict[str, int]:
    touched = late_judgments_exclude_all(campaign=campaign)
    stale = (
        Participation.objects.filter(campaign=campaign, status=ParticipationStatus.ACTIVE)
        .annotate(last_judgment=Max("judgments__created_at"), judged=Count("judgments"))
        .filter(judged__gt=0)
        .filter(Q(qc_stats__isnull=True) | Q(last_judgment__gt=F("qc_stats__computed_at")))
        .values_list("id", flat=True)[:SWEEP_MAX_WORKERS]
    )
    stale_ids = list(stale)
    if stale_ids:
        touched |= workers_quality_update(
            campaign=campaign, participation_ids=stale_ids, aggregate=False
        )
    touched |= stale_aggregate_candidates(campaign=campaign)
    if touched:
        aggregation_recompute(campaign=campaign, candidate_ids=touched)
    return {"workers": len(stale_ids), "candidates": len(touched)}


def stale_aggregate_candidates(*, campaign: Campaign) -> set[int]:
    """Candidates whose stored judgment counts differ from their judgments."""
    candidate_table = campaign.items.model._meta.db_table
    judgment_table = Judgment._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT cc.id FROM {candidate_table} cc LEFT JOIN ("
            f"SELECT campaign_candidate_id AS id, COUNT(*) AS total, "
            f"SUM(CASE WHEN is_excluded THEN 0 ELSE 1 END) AS kept "
            f"FROM {judgment_table} WHERE campaign_id = %s GROUP BY campaign_candidate_id) j "
            f"ON j.id = cc.id WHERE cc.campaign_id = %s AND ("
            f"cc.judgments_total <> COALESCE(j.total, 0) OR cc.kept_judgments <> COALESCE(j.kept, 0))",
            [campaign.pk, campaign.pk],
        )
        return {row[0] for row in cursor.fetchall()}
