"""The running statistics' storage (`WorkerQCStats.running_*`, migration 0019) and the one rule
that keeps their agreement moments true: they are relative to the candidates' stored sums
(`CampaignCandidate.kept_sums` / `kept_counts`; NULL or of another length counts as no sums),
so whoever rewrites those sums moves the moments of every judgment on them that the workers'
states hold (`agreement_push`, called by aggregation in its transaction: old contribution out,
new in). A state holds a worker's judgments up to `WorkerQCStats.through_judgment_id`; a
judgment above it is not in the state and is not pushed.

Lock order: candidate rows, then statistics rows (aggregation locks its candidates with
`stored_sums_read(lock=True)`, then the raters' rows; a pass storing states reads its
candidates' sums `FOR SHARE`, then locks its workers' rows)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db import connection, transaction
from numpy.typing import NDArray

from annotation.crowd.services.columns import ColumnKind, copy_arrays_to_temp_table, pg_array
from annotation.models import Campaign, CampaignCandidate, WorkerQCStats
from annotation.quality.loading import CampaignSlice, _table, id_filter
from annotation.quality.running import (
    COUNTS,
    RunningState,
    empty_state,
    median_stand_in,
    running_state,
    widened,
)
from annotation.quality.statistics import OTHERS_WIDTH, ReferenceSums

_RUNNING_COLUMNS = (
    "running_counts",
    "running_agreement",
    "running_timing_ms",
    "running_clip_ratios",
)


def stored_sums_read(
    *,
    campaign: Campaign,
    candidate_ids: NDArray[np.int64],
    questions: int,
    lock: str | None = None,
) -> ReferenceSums:
    """The sums stored on `candidate_ids` (sorted), rows in their order; zeros where none are
    usable. `lock`: "NO KEY UPDATE" or "SHARE" to lock the rows (in id order) for the
    transaction (not "UPDATE": it would also block the foreign-key checks, FOR KEY SHARE, of every
    judgment and assignment inserted on those candidates meanwhile, i.e. the crowd's submits)."""
    sums = ReferenceSums(
        total=np.zeros((len(candidate_ids), questions)),
        count=np.zeros((len(candidate_ids), questions)),
    )
    if not len(candidate_ids):
        return sums
    clause, params = id_filter("cc.id", candidate_ids.tolist())
    suffix = f" ORDER BY cc.id FOR {lock} OF cc" if lock else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT cc.id, cc.kept_sums, cc.kept_counts FROM {_table(CampaignCandidate)} cc "
            f"WHERE cc.campaign_id = %s AND {clause}{suffix}",
            [campaign.pk, *params],
        )
        for item, kept_sums, kept_counts in cursor.fetchall():
            if (
                kept_sums is None
                or kept_counts is None
                or len(kept_sums) != questions
                or len(kept_counts) != questions
            ):
                continue
            row = int(np.searchsorted(candidate_ids, item))
            sums.total[row] = kept_sums
            sums.count[row] = kept_counts
    return sums


def running_states_load(
    participation_ids: Sequence[int], *, lock: bool = False, medians: bool = True
) -> tuple[RunningState, NDArray[np.bool_], NDArray[np.int64]]:
    """The stored states of `participation_ids` (rows in that order), whether each has one (with
    its watermark), and the watermarks: through id, judgments and kept ones up to it. Without
    `medians` the sorted values (the part that grows with the history) are not read: empty."""
    state = empty_state(len(participation_ids))
    present = np.zeros(len(participation_ids), dtype=bool)
    marks = np.full((len(participation_ids), 3), -1, dtype=np.int64)
    row_of = {int(pid): row for row, pid in enumerate(participation_ids)}
    suffix = " ORDER BY participation_id FOR UPDATE" if lock else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT participation_id, through_judgment_id, judgments_through, kept_through, "
            f"{', '.join(_RUNNING_COLUMNS if medians else (*_RUNNING_COLUMNS[:2], 'NULL', 'NULL'))} "
            f"FROM {WorkerQCStats._meta.db_table} "
            f"WHERE participation_id = ANY(%s){suffix}",
            [list(row_of)],
        )
        rows = cursor.fetchall()
    width = max((len(row[5] or ()) // OTHERS_WIDTH for row in rows), default=0)
    state.agreement = np.zeros((len(participation_ids), width, OTHERS_WIDTH), dtype=np.int64)
    for pid, through, counted, kept, counts, agreement, timing, ratios in rows:
        row = row_of[int(pid)]
        if through is None or counted is None or kept is None:
            continue
        marks[row] = (through, counted, kept)
        if counts is None or len(counts) != len(COUNTS) or agreement is None:
            continue
        present[row] = True
        state.counts[row] = counts
        flat = np.asarray(agreement, dtype=np.int64).reshape(-1, OTHERS_WIDTH)
        state.agreement[row, : len(flat)] = flat
        state.timing_ms[row] = np.asarray(timing or [], dtype=np.int64)
        state.clip_ratios[row] = np.asarray(ratios or [], dtype=np.float64)
    return state, present, marks


def _literal(values: Any) -> str:
    return "{" + ",".join(repr(value) for value in np.asarray(values).tolist()) + "}"


def running_states_write(
    participation_ids: Sequence[int], state: RunningState | None, *, medians: bool = True
) -> None:
    """Write the states of `participation_ids` (rows of `state`) to their existing statistics
    rows; `state=None` clears them (the next pass reads everything). Without `medians` the
    sorted values are left as they are. The arrays go in one binary COPY into a temporary
    table, then one UPDATE."""
    if not len(participation_ids):
        return
    table = WorkerQCStats._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        if state is None:
            cursor.execute(
                f"UPDATE {table} SET {', '.join(f'{c} = NULL' for c in _RUNNING_COLUMNS)} "
                f"WHERE participation_id = ANY(%s)",
                [list(participation_ids)],
            )
            return
        counts = state.counts
        arrays: list[tuple[str, ColumnKind, NDArray[Any], NDArray[np.int64]]] = [
            ("c0", "int8", counts.reshape(-1), np.full(len(counts), counts.shape[1], np.int64)),
            ("c1", "int8", *_trimmed(state.agreement)),
        ]
        if medians:
            arrays.append(("c2", "int4", *_flattened(state.timing_ms, np.int64)))
            arrays.append(("c3", "float8", *_flattened(state.clip_ratios, np.float64)))
        copy_arrays_to_temp_table(
            "qc_running", ("participation_id", np.asarray(participation_ids, np.int64)), arrays
        )
        assigned = ", ".join(
            f"{column} = x.{name}"
            for column, (name, _, _, _) in zip(_RUNNING_COLUMNS, arrays, strict=False)
        )
        cursor.execute(
            f"UPDATE {table} AS s SET {assigned} FROM qc_running AS x "
            "WHERE s.participation_id = x.participation_id"
        )


_MEDIAN_COLUMNS = (
    ("running_timing_ms", "integer[]"),
    ("running_clip_ratios", "double precision[]"),
)


def _net(removed: NDArray[Any], added: NDArray[Any]) -> tuple[list[Any], list[Any]]:
    """`removed` and `added` (multisets) less what they share: a pass takes out and puts back
    the timing of every old judgment on a touched clip; only the new ones' are a change."""
    out, into = Counter(removed.tolist()), Counter(added.tolist())
    return sorted((out - into).elements()), sorted((into - out).elements())


def _median_changes(
    participation_ids: Sequence[int],
    removed: RunningState,
    added: RunningState,
    replace: Sequence[bool],
) -> list[Any]:
    """The parameters of `_median_source`: ids, then per median column the values to take out
    and to put in (rows of `removed` and `added`, net; where `replace`, none and all of
    `added`'s), as array literals, then `replace`."""
    columns = []
    for name in ("timing_ms", "clip_ratios"):
        pairs = [
            ([], values.tolist()) if whole else _net(gone, values)
            for gone, values, whole in zip(
                getattr(removed, name), getattr(added, name), replace, strict=True
            )
        ]
        for side in (0, 1):
            columns.append(pg_array([_literal(pair[side]) for pair in pairs], "text"))
    ids = pg_array([int(p) for p in participation_ids], "int8")
    return [ids, *columns, pg_array([bool(whole) for whole in replace], "bool")]


def _median_source() -> tuple[str, list[str]]:
    """`unnest(...) AS x(...)` of `_median_changes`, and per median column (`s.<column>` its
    stored values) the expression of its new sorted values."""
    source = (
        "unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[], %s::boolean[]) "
        "AS x(pid, r0, a0, r1, a1, replace)"
    )
    merged = [
        f"CASE WHEN x.replace THEN x.a{index}::{cast} ELSE "
        f"lepus_sorted_merge(s.{column}, x.r{index}::{cast}, x.a{index}::{cast}) END"
        for index, (column, cast) in enumerate(_MEDIAN_COLUMNS)
    ]
    return source, merged


def median_values_read(
    participation_ids: Sequence[int], *, removed: RunningState, added: RunningState
) -> tuple[list[list[Any]], list[list[Any]]]:
    """Per worker (rows of `removed` and `added`), the `running.median_stand_in` of their stored
    sorted values less `removed`'s plus `added`'s: the timing milliseconds, the clip ratios.
    PostgreSQL merges the values (`lepus_sorted_merge`, migration 0020); only the changed ones
    and two per median cross the wire."""
    timing: list[list[Any]] = [[] for _ in participation_ids]
    ratios: list[list[Any]] = [[] for _ in participation_ids]
    if not len(participation_ids):
        return timing, ratios
    source, merged = _median_source()
    middle = ", ".join(
        f"cardinality(m{i}.v), m{i}.v[(cardinality(m{i}.v) + 1) / 2], m{i}.v[cardinality(m{i}.v) / 2 + 1]"
        for i in range(len(merged))
    )
    # OFFSET 0 keeps each merge a subquery evaluated once per row: pulled up, its expression
    # would be evaluated again for every reference (the count and both middle values).
    lateral = " ".join(
        f"CROSS JOIN LATERAL (SELECT {expression} AS v OFFSET 0) m{i}"
        for i, expression in enumerate(merged)
    )
    row_of = {int(pid): row for row, pid in enumerate(participation_ids)}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT x.pid, {middle} FROM {source} "
            f"JOIN {WorkerQCStats._meta.db_table} s ON s.participation_id = x.pid {lateral}",
            _median_changes(participation_ids, removed, added, [False] * len(participation_ids)),
        )
        for pid, *values in cursor.fetchall():
            row = row_of[int(pid)]
            timing[row] = median_stand_in(values[0] or 0, values[1], values[2])
            ratios[row] = median_stand_in(values[3] or 0, values[4], values[5])
    return timing, ratios


def median_values_write(
    participation_ids: Sequence[int],
    *,
    removed: RunningState,
    added: RunningState,
    replace: Sequence[bool],
) -> None:
    """Store each worker's sorted median values less `removed`'s plus `added`'s (rows), or, where
    `replace`, `added`'s alone (a state rebuilt from every judgment)."""
    if not len(participation_ids):
        return
    source, merged = _median_source()
    assignments = ", ".join(
        f"{column} = COALESCE({expression}, '{{}}')"
        for (column, _), expression in zip(_MEDIAN_COLUMNS, merged, strict=True)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {WorkerQCStats._meta.db_table} AS s SET {assignments} FROM {source} "
            "WHERE s.participation_id = x.pid",
            _median_changes(participation_ids, removed, added, replace),
        )


def _flattened(arrays: list[NDArray[Any]], dtype: Any) -> tuple[NDArray[Any], NDArray[np.int64]]:
    """`arrays` (as `dtype`) end to end, and their lengths."""
    lengths = np.fromiter((len(values) for values in arrays), np.int64, len(arrays))
    if not arrays:
        return np.zeros(0, dtype=dtype), lengths
    return np.concatenate([np.asarray(values, dtype=dtype) for values in arrays]), lengths


def _trimmed(agreement: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each worker's numerators without trailing all-zero columns (they add nothing), flattened
    row after row, and how many values each row keeps."""
    rows, width = agreement.shape[:2]
    used: NDArray[np.bool_] = np.any(agreement, axis=2)
    kept = np.zeros(rows, dtype=np.int64)
    if width:
        last = width - np.argmax(used[:, ::-1], axis=1)
        kept = np.where(np.any(used, axis=1), last, 0).astype(np.int64)
    within = np.arange(width)[None, :] < kept[:, None]
    return agreement[within].reshape(-1), kept * agreement.shape[2]


def slice_state(
    data: CampaignSlice,
    selected: NDArray[np.bool_],
    sums: ReferenceSums,
    reference: NDArray[np.bool_],
) -> RunningState:
    """`running_state` of the `selected` judgments of a campaign slice, against `sums`."""
    return running_state(
        data.judgments,
        data.candidates,
        data.clip_seconds,
        workers=len(data.workers),
        selected=selected,
        sums=sums,
        reference=reference,
    )


def agreement_push(data: CampaignSlice, *, old: ReferenceSums, new: ReferenceSums) -> int:
    """The candidates of `data` (a slice with every judgment on them) had sums `old` and are
    getting `new`: move the agreement moments of every state holding a judgment on a candidate
    whose sums change. Called in the transaction that writes `new`, after `old` was read with
    the rows locked. Returns the states moved."""
    changed = (old.total != new.total).any(axis=1) | (old.count != new.count).any(axis=1)
    judgments = data.judgments
    on_changed = changed[judgments.item]
    if not on_changed.any():
        return 0
    raters = np.unique(judgments.worker[on_changed])
    participation_ids = data.workers.ids[raters].tolist()
    state, present, marks = running_states_load(participation_ids, lock=True, medians=False)
    if not present.any():
        return 0
    through = np.full(len(data.workers), -1, dtype=np.int64)
    through[raters[present]] = marks[present, 0]
    held = on_changed & (judgments.ids <= through[judgments.worker])
    kept = ~judgments.excluded
    moved = [slice_state(data, held, sums, kept) for sums in (new, old)]
    width = max(state.agreement.shape[1], *(m.agreement.shape[1] for m in moved))
    start = COUNTS.index("agreement_n")
    rows = np.flatnonzero(present)
    for sign, moment in zip((1, -1), moved, strict=True):
        state.counts[rows, start:] += sign * moment.counts[raters[rows], start:]
        state.agreement = widened(state.agreement, width)
        state.agreement[rows] += sign * widened(moment.agreement, width)[raters[rows]]
    chosen = [participation_ids[row] for row in rows.tolist()]
    running_states_write(chosen, state.take(rows), medians=False)
    return len(chosen)
