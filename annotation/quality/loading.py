"""Reading a campaign (or a slice of it) into the column tables QC computes on.

A `CampaignSlice` holds the candidates, clips, judgments and participations QC needs, as NumPy
columns. The whole campaign is read for a full recompute; after a submission only the candidates
the submitting worker rated are read (with every judgment on them, for the leave-one-out mean),
without what only aggregation needs (expert resolutions, review items); `campaign_slice_subset`
then cuts out the few candidates whose aggregates must be brought up to date and reads those for
them alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

import numpy as np
from django.core.cache import cache
from django.db import connection
from numpy.typing import NDArray

from annotation.crowd.services.columns import fetch_columns, json_number
from annotation.models import (
    Campaign,
    CampaignCandidate,
    Judgment,
    JudgmentSource,
    Participation,
    ParticipationStatus,
    Platform,
    ReviewItem,
    Worker,
    WorkerExclusion,
)
from annotation.quality.statistics import CandidateColumns, JudgmentColumns
from datasets_app.models import Clip

CAMPAIGN_MEDIAN_CACHE_SECONDS = 60

# A whole campaign read from a judgment table of at least this many pages (8 kB each; about
# 180,000 judgments) is read in two halves of the table at once, each by its own connection and
# so its own PostgreSQL backend, while this thread reads the candidates: the read of a million
# judgments is mostly the backend's work (extracting the ratings from the JSON), which then
# runs on two cores instead of one. See `_judgments_read`.
PARALLEL_READ_MIN_PAGES = 4000


@dataclass
class WorkerColumns:
    """One row per participation in the slice."""

    ids: NDArray[np.int64]
    imported: NDArray[np.bool_]
    excluded: NDArray[np.bool_]
    # A curator re-included this worker: rules flag but never exclude them again.
    overridden: NDArray[np.bool_]
    external_ids: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class CampaignSlice:
    campaign: Campaign
    question_keys: list[str]
    candidates: CandidateColumns
    clip_ids: NDArray[np.int64]
    clip_seconds: NDArray[np.float64]
    judgments: JudgmentColumns
    workers: WorkerColumns
    dropped: NDArray[np.bool_]
    slots_taken: NDArray[np.int64]
    # item index -> {"<question key>": value} of an expert resolution
    resolutions: dict[int, dict[str, float]]
    # item index -> (review item id, status)
    review_items: dict[int, tuple[int, str]]
    # The judgment counts stored on each candidate by the last aggregation (see
    # `annotation.quality.aggregation.stale_positions`).
    stored_total: NDArray[np.int64]
    stored_kept: NDArray[np.int64]


def id_filter(column: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
    """`column IN ids` as SQL and parameters: the ids travel as one array parameter."""
    return f"{column} = ANY(%s::bigint[])", [list(map(int, ids))]


def _campaign_where(
    campaign_column: str, campaign: Campaign, id_column: str, subset: list[int] | None
) -> tuple[str, list[Any]]:
    """The campaign's rows, or only those whose `id_column` is in `subset`, as SQL and
    parameters."""
    where = f"{campaign_column} = %s"
    params: list[Any] = [campaign.pk]
    if subset is not None:
        clause, clause_params = id_filter(id_column, subset)
        where += f" AND {clause}"
        params += clause_params
    return where, params


def _table(model: Any) -> str:
    return model._meta.db_table


def expected_ranges(spec: dict[str, Any], question_keys: list[str]) -> tuple[list[int], list[int]]:
    """Lows and highs per question from a control spec ({"expected": {"<key>": [low, high]}})."""
    expected = (spec or {}).get("expected", {}) or {}
    lows, highs = [], []
    for key in question_keys:
        bounds = expected.get(key)
        if isinstance(bounds, (list, tuple)) and len(bounds) == 2:
            lows.append(int(bounds[0]))
            highs.append(int(bounds[1]))
        else:
            lows.append(0)
            highs.append(0)
    return lows, highs


def campaign_slice_load(
    *,
    campaign: Campaign,
    candidate_ids: Iterable[int] | None = None,
    extra_participation_ids: Iterable[int] = (),
    for_aggregation: bool = True,
    judges: Sequence[int] | None = None,
) -> CampaignSlice:
    """Read the candidates (all, or `candidate_ids`) with every judgment on them (or, with
    `judges`, only those participations' judgments on them). Without `for_aggregation` the slice
    has what worker statistics need: no expert resolutions and no review items
    (`campaign_slice_subset` reads them for the candidates to aggregate). A judges' slice is
    never one to aggregate (it lacks the other workers' judgments) and lists every judge among
    its workers, with judgments or not."""
    if judges is not None:
        for_aggregation = False
        extra_participation_ids = [*extra_participation_ids, *judges]
    question_keys = campaign.question_keys
    subset = None if candidate_ids is None else sorted({int(value) for value in candidate_ids})
    # Started first: on a large campaign its two halves are read by other connections while
    # this one reads the candidates, clips, controls and review items below.
    judgments_pending = _judgments_read(campaign, question_keys, subset, judges=judges)
    candidate_rows = _candidate_rows(campaign, subset)
    ids = candidate_rows["id"].astype(np.int64)
    clip_ids, clip_index = np.unique(candidate_rows["clip_id"], return_inverse=True)
    clip_seconds = _clip_seconds(clip_ids, campaign=campaign if subset is None else None)
    expected_low, expected_high = _control_expectations(
        campaign,
        question_keys,
        ids,
        # The slice's controls only (a short list), not the thousands of candidates of a slice.
        control_ids=None if subset is None else ids[candidate_rows["is_control"]].tolist(),
    )

    resolutions: dict[int, dict[str, float]] = {}
    review_items: dict[int, tuple[int, str]] = {}
    if for_aggregation:
        resolutions, review_items = _review_inputs_load(campaign, ids, whole=subset is None)

    judgments = _judgments_columns(judgments_pending(), question_keys, ids)
    participation_ids = np.unique(
        np.concatenate(
            [judgments["participation_id"], np.fromiter(extra_participation_ids, np.int64)]
        )
    )
    workers = workers_load(campaign=campaign, participation_ids=participation_ids)
    judgment_columns = JudgmentColumns(
        ids=judgments["id"],
        item=judgments["item"],
        worker=np.searchsorted(participation_ids, judgments["participation_id"]).astype(np.int64),
        server_ms=judgments["server_ms"],
        excluded=judgments["is_excluded"],
        imported=judgments["imported"],
        values=judgments["values"],
    )
    candidates = CandidateColumns(
        ids=ids,
        clip=clip_index.astype(np.int64),
        quota=candidate_rows["quota"].astype(np.int64),
        is_control=candidate_rows["is_control"],
        expected_low=expected_low,
        expected_high=expected_high,
    )
    return CampaignSlice(
        campaign=campaign,
        question_keys=question_keys,
        candidates=candidates,
        clip_ids=clip_ids.astype(np.int64),
        clip_seconds=clip_seconds,
        judgments=judgment_columns,
        workers=workers,
        dropped=candidate_rows["dropped"],
        slots_taken=candidate_rows["slots_taken"].astype(np.int64),
        resolutions=resolutions,
        review_items=review_items,
        stored_total=candidate_rows["judgments_total"].astype(np.int64),
        stored_kept=candidate_rows["kept_judgments"].astype(np.int64),
    )


def _candidate_rows(campaign: Campaign, subset: list[int] | None) -> dict[str, NDArray[Any]]:
    where, params = _campaign_where("cc.campaign_id", campaign, "cc.id", subset)
    return fetch_columns(
        f"SELECT cc.id, cc.clip_id, cc.quota, cc.slots_taken, cc.is_control, cc.dropped, "
        f"cc.judgments_total, cc.kept_judgments "
        f"FROM {_table(CampaignCandidate)} cc WHERE {where} ORDER BY cc.id",
        params,
        [
            ("id", "int8"),
            ("clip_id", "int8"),
            ("quota", "int4"),
            ("slots_taken", "int4"),
            ("is_control", "bool"),
            ("dropped", "bool"),
            ("judgments_total", "int8"),
            ("kept_judgments", "int8"),
        ],
    )


def _control_expectations(
    campaign: Campaign,
    question_keys: list[str],
    ids: NDArray[np.int64],
    *,
    control_ids: list[int] | None,
) -> tuple[NDArray[np.int8], NDArray[np.int8]]:
    """Expected lows and highs (candidates × questions, 0: nothing expected) of the control
    candidates among `ids` (all the campaign's controls, or `control_ids`)."""
    expected_low = np.zeros((len(ids), len(question_keys)), dtype=np.int8)
    expected_high = np.zeros((len(ids), len(question_keys)), dtype=np.int8)
    controls = CampaignCandidate.objects.filter(campaign=campaign, is_control=True)
    if control_ids is not None:
        controls = controls.filter(id__in=control_ids)
    for candidate_id, spec in controls.values_list("id", "candidate__control_spec"):
        position = int(np.searchsorted(ids, candidate_id))
        if position < len(ids) and ids[position] == candidate_id:
            lows, highs = expected_ranges(spec, question_keys)
            expected_low[position] = lows
            expected_high[position] = highs
    return expected_low, expected_high


def campaign_slice_subset(data: CampaignSlice, positions: NDArray[np.int64]) -> CampaignSlice:
    """The candidates of `data` at `positions` (sorted) with their judgments, ready for
    aggregation: their expert resolutions and review items are read here (a slice read
    without `for_aggregation` has none). Workers and clips stay those of `data`."""
    chosen = np.asarray(positions, dtype=np.int64)
    candidates = data.candidates
    ids = candidates.ids[chosen]
    remap = np.full(len(candidates), -1, dtype=np.int64)
    remap[chosen] = np.arange(len(chosen), dtype=np.int64)
    judgments = data.judgments
    rows = remap[judgments.item] >= 0
    resolutions, review_items = _review_inputs_load(data.campaign, ids, whole=False)
    return CampaignSlice(
        campaign=data.campaign,
        question_keys=data.question_keys,
        candidates=_rows(candidates, chosen),
        clip_ids=data.clip_ids,
        clip_seconds=data.clip_seconds,
        judgments=replace(_rows(judgments, rows), item=remap[judgments.item[rows]]),
        workers=data.workers,
        dropped=data.dropped[chosen],
        slots_taken=data.slots_taken[chosen],
        resolutions=resolutions,
        review_items=review_items,
        stored_total=data.stored_total[chosen],
        stored_kept=data.stored_kept[chosen],
    )


Columns = TypeVar("Columns", CandidateColumns, JudgmentColumns)


def _rows(columns: Columns, index: NDArray[Any]) -> Columns:
    """The rows `index` (positions or a mask) of every column of `columns`."""
    return type(columns)(**{f.name: getattr(columns, f.name)[index] for f in fields(columns)})


def _review_inputs_load(
    campaign: Campaign, ids: NDArray[np.int64], *, whole: bool
) -> tuple[dict[int, dict[str, float]], dict[int, tuple[int, str]]]:
    """Expert resolutions and review items of the candidates `ids` (sorted; `whole`: they are
    every candidate of the campaign), keyed by position in `ids`."""
    resolutions: dict[int, dict[str, float]] = {}
    subset = None if whole else ids.tolist()
    resolved_where, resolved_params = _campaign_where("campaign_id", campaign, "id", subset)
    review_where, review_params = _campaign_where(
        "campaign_id", campaign, "campaign_candidate_id", subset
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, resolution FROM {_table(CampaignCandidate)} "
            f"WHERE {resolved_where} AND resolution <> '{{}}'::jsonb",
            resolved_params,
        )
        resolved = cursor.fetchall()
        cursor.execute(
            f"SELECT id, campaign_candidate_id, status FROM {_table(ReviewItem)} "
            f"WHERE {review_where}",
            review_params,
        )
        review_rows = cursor.fetchall()
    for candidate_id, resolution in resolved:
        # Django reads jsonb as text on its connections (its JSONField decodes it).
        parsed = json.loads(resolution) if isinstance(resolution, str) else resolution
        values = (parsed or {}).get("values") or {}
        position = int(np.searchsorted(ids, candidate_id))
        if values and position < len(ids) and ids[position] == candidate_id:
            resolutions[position] = {
                key: float(value) for key, value in values.items() if value is not None
            }

    review_items: dict[int, tuple[int, str]] = {}
    if review_rows:
        found = _positions(ids, [row[1] for row in review_rows])
        for (review_id, _candidate_id, status), position in zip(
            review_rows, found.tolist(), strict=True
        ):
            if position >= 0:
                review_items[position] = (review_id, status)
    return resolutions, review_items


def _positions(sorted_ids: NDArray[np.int64], wanted: Sequence[int]) -> NDArray[np.int64]:
    """Index of each wanted id in `sorted_ids`, -1 where absent (vectorised)."""
    values = np.asarray(wanted, dtype=np.int64)
    if sorted_ids.size == 0:
        return np.full(values.shape, -1, dtype=np.int64)
    positions = np.clip(np.searchsorted(sorted_ids, values), 0, sorted_ids.size - 1)
    return np.where(sorted_ids[positions] == values, positions, -1).astype(np.int64)


def _clip_seconds(
    clip_ids: NDArray[np.int64], *, campaign: Campaign | None = None
) -> NDArray[np.float64]:
    """Seconds of each clip; with `campaign` (a whole campaign is loaded) the clips are selected
    through the campaign's candidates rather than as a list of ids (100,000s of them)."""
    if clip_ids.size == 0:
        return np.zeros(0)
    if campaign is not None:
        clause = (
            f"c.id IN (SELECT cc.clip_id FROM {_table(CampaignCandidate)} cc "
            f"WHERE cc.campaign_id = %s)"
        )
        params: list[Any] = [campaign.pk]
    else:
        clause, params = id_filter("c.id", clip_ids.tolist())
    rows = fetch_columns(
        f"SELECT c.id, COALESCE(c.duration, c.end_seconds - c.start_seconds) "
        f"FROM {_table(Clip)} c WHERE {clause} ORDER BY c.id",
        params,
        [("id", "int8"), ("seconds", "float8")],
    )
    seconds = np.full(len(clip_ids), np.nan)
    positions = np.searchsorted(rows["id"], clip_ids)
    positions = np.clip(positions, 0, max(len(rows["id"]) - 1, 0))
    if len(rows["id"]):
        found = rows["id"][positions] == clip_ids
        seconds[found] = rows["seconds"][positions[found]]
    seconds[~(seconds > 0)] = np.nan
    return seconds


def _judgments_read(
    campaign: Campaign,
    question_keys: list[str],
    subset: list[int] | None,
    *,
    judges: Sequence[int] | None = None,
) -> Callable[[], dict[str, NDArray[Any]]]:
    """Start reading the judgments of the campaign (or of the candidates in `subset`); returns
    the function that gives their raw columns.

    A whole campaign on PostgreSQL, outside a transaction, from a table of at least
    `PARALLEL_READ_MIN_PAGES` pages, is read in two halves by physical position (`ctid` below /
    from the middle page), each in a thread with its own connection, started now. The halves
    are joined in page order, i.e. the order of a single sequential scan. Anything else (a
    slice, another database, a caller's transaction, whose uncommitted rows another
    connection would not see) is read by this connection when the function is called."""
    values_column = 'j."values"'
    value_columns = ", ".join(
        f"COALESCE({json_number(values_column, key)}, 0)" for key in question_keys
    )
    where, params = _campaign_where("j.campaign_id", campaign, "j.campaign_candidate_id", subset)
    if judges is not None:
        clause, clause_params = id_filter("j.participation_id", sorted(judges))
        where += f" AND {clause}"
        params += clause_params
    columns: list[tuple[str, Any]] = [
        ("id", "int8"),
        ("campaign_candidate_id", "int8"),
        ("participation_id", "int8"),
        ("server_ms", "int8"),
        ("is_excluded", "bool"),
        ("imported", "bool"),
    ] + [(f"q{index}", "float8") for index in range(len(question_keys))]
    sql = (
        f"SELECT j.id, j.campaign_candidate_id, j.participation_id, COALESCE(j.server_ms, -1), "
        f"j.is_excluded, CASE WHEN j.source = %s THEN 1 ELSE 0 END"
        f"{', ' if value_columns else ''}{value_columns} "
        f"FROM {_table(Judgment)} j WHERE {where}"
    )
    params = [JudgmentSource.IMPORTED, *params]
    middle = None if judges is not None else _parallel_read_middle(subset)
    if middle is None:
        return lambda: fetch_columns(sql, params, columns)
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="qc-judgments")
    halves = [
        pool.submit(
            _fetch_in_own_connection, f"{sql} AND j.ctid {op} %s::tid", [*params, tid], columns
        )
        for op, tid in (("<", f"({middle},0)"), (">=", f"({middle},0)"))
    ]
    pool.shutdown(wait=False)

    def joined() -> dict[str, NDArray[Any]]:
        first, second = (half.result() for half in halves)
        return {name: np.concatenate([first[name], second[name]]) for name, _ in columns}

    return joined


def _parallel_read_middle(subset: list[int] | None) -> int | None:
    """The page at which to split a parallel read of the judgment table, None for one read."""
    if subset is not None or connection.in_atomic_block:
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT relpages FROM pg_class WHERE oid = %s::regclass", [_table(Judgment)])
        row = cursor.fetchone()
    pages = int(row[0]) if row and row[0] else 0
    return pages // 2 if pages >= max(PARALLEL_READ_MIN_PAGES, 2) else None


def _fetch_in_own_connection(
    sql: str, params: list[Any], columns: list[tuple[str, Any]]
) -> dict[str, NDArray[Any]]:
    """`fetch_columns` from a worker thread: Django gives the thread its own connection, which
    is closed when done."""
    try:
        return fetch_columns(sql, params, columns)
    finally:
        connection.close()


def _judgments_columns(
    rows: dict[str, NDArray[Any]], question_keys: list[str], candidate_ids: NDArray[np.int64]
) -> dict[str, Any]:
    item = np.searchsorted(candidate_ids, rows["campaign_candidate_id"])
    values = np.zeros((len(rows["id"]), len(question_keys)), dtype=np.int8)
    for index in range(len(question_keys)):
        raw = np.rint(rows[f"q{index}"])
        raw[(raw < 1) | (raw > 5)] = 0  # outside the scale counts as "not answered"
        values[:, index] = raw.astype(np.int8)
    return {
        "id": rows["id"].astype(np.int64),
        "item": item.astype(np.int64),
        "participation_id": rows["participation_id"].astype(np.int64),
        "server_ms": rows["server_ms"].astype(np.int64),
        "is_excluded": rows["is_excluded"].astype(bool),
        "imported": rows["imported"].astype(bool),
        "values": values,
    }


def workers_load(*, campaign: Campaign, participation_ids: NDArray[np.int64]) -> WorkerColumns:
    """Participation columns, in the order of the sorted `participation_ids`. One statement, the
    ids as one array parameter (a quality pass runs it for every aggregation: the ORM's
    per-id parameters and per-row loop cost more Python than the read)."""
    ids = np.asarray(participation_ids, dtype=np.int64)
    imported = np.zeros(len(ids), dtype=bool)
    excluded = np.zeros(len(ids), dtype=bool)
    overridden = np.zeros(len(ids), dtype=bool)
    external_ids = [""] * len(ids)
    if len(ids) == 0:
        return WorkerColumns(ids, imported, excluded, overridden, external_ids)
    where, params = _campaign_where(
        "p.campaign_id", campaign, "p.id", ids.tolist() if len(ids) < 5000 else None
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT p.id, p.status, w.platform, w.external_id, EXISTS (SELECT 1 FROM "
            f"{_table(WorkerExclusion)} e WHERE e.participation_id = p.id "
            f"AND e.reversed_at IS NOT NULL) FROM {_table(Participation)} p "
            f"JOIN {_table(Worker)} w ON w.id = p.worker_id WHERE {where}",
            params,
        )
        rows = cursor.fetchall()
    found = _positions(ids, [row[0] for row in rows])
    for position, (_, status, platform, external_id, reversed_exclusion) in zip(
        found.tolist(), rows, strict=True
    ):
        if position < 0:
            continue
        imported[position] = platform == Platform.IMPORTED
        excluded[position] = status == ParticipationStatus.EXCLUDED
        overridden[position] = reversed_exclusion
        external_ids[position] = external_id
    return WorkerColumns(ids, imported, excluded, overridden, external_ids)


# Above this many timed judgments the campaign median is read from a short cache (one worker
# cannot move it); below, it is computed fresh without the worker being judged, so the first
# worker of a young campaign is not compared with themselves.
CAMPAIGN_MEDIAN_CACHE_MIN_JUDGMENTS = 2000


def campaign_median_seconds(
    *, campaign: Campaign, excluding_participation_ids: Iterable[int] = ()
) -> float | None:
    """Median server-side seconds per candidate over the campaign's crowd judgments (of other
    workers than `excluding_participation_ids` while the campaign is small)."""
    key = f"lepus:qc:campaign-median:{campaign.pk}"
    cached = cache.get(key)
    if cached is not None and cached[1] >= CAMPAIGN_MEDIAN_CACHE_MIN_JUDGMENTS:
        return float(cached[0])
    rows = fetch_columns(
        f"SELECT j.server_ms, j.participation_id FROM {_table(Judgment)} j "
        f"WHERE j.campaign_id = %s AND j.source = %s AND j.server_ms IS NOT NULL",
        [campaign.pk, JudgmentSource.CROWD],
        [("server_ms", "int8"), ("participation_id", "int8")],
    )
    every = rows["server_ms"]
    if every.size:
        cache.set(
            key, (float(np.median(every)) / 1000.0, int(every.size)), CAMPAIGN_MEDIAN_CACHE_SECONDS
        )
    others = every[~np.isin(rows["participation_id"], list(excluding_participation_ids))]
    return float(np.median(others)) / 1000.0 if others.size else None


def campaign_median_remember(*, campaign: Campaign, median: float | None, judgments: int) -> None:
    if median is not None and not math.isnan(median):
        cache.set(
            f"lepus:qc:campaign-median:{campaign.pk}",
            (float(median), int(judgments)),
            CAMPAIGN_MEDIAN_CACHE_SECONDS,
        )
