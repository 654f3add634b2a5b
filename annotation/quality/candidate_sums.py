"""Per-candidate sums and counts of the kept ratings, for the after-submission pass's
leave-one-out agreement (issue 29): the sums the last aggregation stored on each candidate
(`CampaignCandidate.kept_sums` / `kept_counts`), summed from the judgments where they may be
stale (the candidates of judgments the pass's workers' last pass did not see) or missing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from annotation.crowd.services.columns import fetch_columns, json_number
from annotation.models import Campaign, CampaignCandidate, Judgment
from annotation.quality.loading import _table, id_filter
from annotation.quality.statistics import ReferenceSums


@dataclass
class CandidateSums:
    """Per candidate of a slice (in its order): the kept judgments' `ReferenceSums` and the
    judgment counts (every judgment, kept ones), summed from the judgment table now (`live`) or
    as the last aggregation stored them."""

    sums: ReferenceSums
    total: NDArray[np.int64]
    kept: NDArray[np.int64]
    live: NDArray[np.bool_]


def candidate_sums_load(
    *,
    campaign: Campaign,
    candidate_ids: NDArray[np.int64],
    question_keys: list[str],
    live: NDArray[np.bool_] | None = None,
) -> CandidateSums:
    """What the leave-one-out agreement needs of the other raters of `candidate_ids` (sorted),
    one row per candidate, without reading their judgments into Python.

    Without `live`, every judgment on them is summed by the database. With `live` (a mask over
    `candidate_ids`), only those candidates are summed; the others are read from the sums the
    last aggregation stored on them (`CampaignCandidate.kept_sums` / `kept_counts`, with the
    judgment counts it stored), and so are summed too where none are stored (aggregated before
    they existed, or for other questions). A rating counts as `_judgments_columns` counts it
    (rounded, 1..5; anything else is "not answered")."""
    items = len(candidate_ids)
    questions = len(question_keys)
    result = CandidateSums(
        sums=ReferenceSums(total=np.zeros((items, questions)), count=np.zeros((items, questions))),
        total=np.zeros(items, dtype=np.int64),
        kept=np.zeros(items, dtype=np.int64),
        live=np.ones(items, dtype=bool) if live is None else np.asarray(live, dtype=bool).copy(),
    )
    if not items:
        return result
    if live is not None and not result.live.all():
        _stored_sums_read(campaign, candidate_ids, questions, result)
    if result.live.any():
        _live_sums_read(campaign, candidate_ids, question_keys, result)
    return result


def _stored_sums_read(
    campaign: Campaign, candidate_ids: NDArray[np.int64], questions: int, result: CandidateSums
) -> None:
    """The stored sums of the candidates not `result.live`; those without usable stored sums
    become live."""
    wanted = candidate_ids[~result.live]
    clause, params = id_filter("cc.id", wanted.tolist())
    stored = "".join(
        f", COALESCE(cc.kept_sums[{index + 1}], 0), COALESCE(cc.kept_counts[{index + 1}], 0)"
        for index in range(questions)
    )
    columns = _sum_columns(questions, extra=[("usable", "bool")])
    rows = fetch_columns(
        f"SELECT cc.id, cc.judgments_total, cc.kept_judgments, "
        f"COALESCE(cardinality(cc.kept_sums) = %s AND cardinality(cc.kept_counts) = %s, FALSE)"
        f"{stored} FROM {_table(CampaignCandidate)} cc WHERE cc.campaign_id = %s AND {clause}",
        [questions, questions, campaign.pk, *params],
        columns,
    )
    found = np.zeros(len(candidate_ids), dtype=bool)
    position = np.searchsorted(candidate_ids, rows["id"].astype(np.int64))
    usable = rows["usable"].astype(bool)
    position, rows = position[usable], {name: rows[name][usable] for name, _ in columns}
    found[position] = True
    _place(result, position, rows, questions)
    result.live |= ~found


def _live_sums_read(
    campaign: Campaign,
    candidate_ids: NDArray[np.int64],
    question_keys: list[str],
    result: CandidateSums,
) -> None:
    """Every judgment on the candidates `result.live`, summed by the database."""
    questions = len(question_keys)
    values_column = 'j."values"'
    rounded = ", ".join(
        f"ROUND(COALESCE({json_number(values_column, key)}, 0)) AS r{index}"
        for index, key in enumerate(question_keys)
    )
    answered = [f"NOT s.is_excluded AND s.r{index} BETWEEN 1 AND 5" for index in range(questions)]
    sums = "".join(
        f", COALESCE(SUM(s.r{index}) FILTER (WHERE {condition}), 0), "
        f"COUNT(*) FILTER (WHERE {condition})"
        for index, condition in enumerate(answered)
    )
    wanted = candidate_ids[result.live]
    clause, params = id_filter("j.campaign_candidate_id", wanted.tolist())
    columns = _sum_columns(questions)
    # A candidate without judgments has no row: zeros.
    live_positions = np.flatnonzero(result.live)
    result.total[live_positions] = 0
    result.kept[live_positions] = 0
    result.sums.total[live_positions] = 0
    result.sums.count[live_positions] = 0
    rows = fetch_columns(
        f"SELECT s.campaign_candidate_id, COUNT(*), COUNT(*) FILTER (WHERE NOT s.is_excluded)"
        f"{sums} FROM (SELECT j.campaign_candidate_id, j.is_excluded"
        f"{', ' if rounded else ''}{rounded} FROM {_table(Judgment)} j "
        f"WHERE j.campaign_id = %s AND {clause}) s GROUP BY s.campaign_candidate_id",
        [campaign.pk, *params],
        columns,
    )
    _place(result, np.searchsorted(candidate_ids, rows["id"].astype(np.int64)), rows, questions)


def _sum_columns(
    questions: int, extra: list[tuple[str, Any]] | None = None
) -> list[tuple[str, Any]]:
    """The columns both reads return: id, judgment counts (all, kept), then `extra`, then the
    sum and count of the kept answered ratings per question."""
    columns: list[tuple[str, Any]] = [("id", "int8"), ("total", "int8"), ("kept", "int8")]
    columns += extra or []
    for index in range(questions):
        columns += [(f"sum{index}", "float8"), (f"count{index}", "float8")]
    return columns


def _place(
    result: CandidateSums, position: NDArray[Any], rows: dict[str, Any], questions: int
) -> None:
    """Rows of either read into `result` at the candidates' `position`s."""
    result.total[position] = rows["total"]
    result.kept[position] = rows["kept"]
    for index in range(questions):
        result.sums.total[position, index] = rows[f"sum{index}"]
        result.sums.count[position, index] = rows[f"count{index}"]
