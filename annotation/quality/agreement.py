"""Krippendorff's alpha (ordinal, values 1..5) of campaigns and releases, from the database.

The database groups judgments into one row per candidate with the count of each value (1..5);
rows are streamed in chunks through a server-side cursor and folded into a 5 × 5 coincidence
matrix (`annotation.quality.krippendorff`), so memory stays the same whether a candidate was rated by three
workers or three thousand, and however many candidates there are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

import numpy as np
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from annotation.crowd.services.columns import json_number
from annotation.models import AgreementSnapshot, Campaign, CampaignCandidate, Judgment
from annotation.quality.krippendorff import (
    CoincidenceSum,
    alpha_from_coincidence,
    coincidence_from_counts,
)
from annotation.quality.loading import id_filter

VALUES = (1, 2, 3, 4, 5)
CHUNK_ROWS = 20_000


class Alpha(TypedDict):
    """Ordinal alpha (None: nothing to compare), the candidates with at least two ratings and
    the ratings on them."""

    alpha: float | None
    items: int
    judgments: int


class AlphaFigures(TypedDict):
    """Alpha before QC (every judgment) and after QC (kept ones), as stored in a snapshot."""

    alpha_all: float | None
    alpha_kept: float | None
    items: int
    judgments: int


class CampaignAlpha(AlphaFigures):
    items_all: int
    judgments_all: int


def _items_clause(items: QuerySet[CampaignCandidate] | Iterable[int]) -> tuple[str, list[Any]]:
    if isinstance(items, QuerySet):
        sql, params = items.values("pk").query.sql_with_params()
        return f"j.campaign_candidate_id IN ({sql})", list(params)
    return id_filter("j.campaign_candidate_id", sorted({int(value) for value in items}))


def agreement_for_items(
    items: QuerySet[CampaignCandidate] | Iterable[int],
    question_key: str,
    *,
    kept_only: bool = True,
) -> Alpha:
    """Ordinal alpha of `question_key` over the judgments of `items` (CampaignCandidate ids or a
    queryset of them). `kept_only` leaves excluded judgments out (alpha after QC).

    Returns {"alpha": float | None, "items": candidates with at least two ratings,
    "judgments": ratings on those candidates}. None when nothing can be compared.
    """
    clause, params = _items_clause(items)
    value = json_number('j."values"', question_key)
    counts = ", ".join(f"SUM(CASE WHEN s.v = {level} THEN 1 ELSE 0 END)" for level in VALUES)
    kept = " AND j.is_excluded = FALSE" if kept_only else ""
    sql = (
        f"SELECT {counts} FROM ("
        f"SELECT j.campaign_candidate_id AS item, ROUND({value}) AS v "
        f"FROM {Judgment._meta.db_table} j WHERE {clause}{kept}"
        f") s WHERE s.v BETWEEN 1 AND 5 GROUP BY s.item HAVING COUNT(*) >= 2"
    )
    coincidences = CoincidenceSum(len(VALUES))
    pairable_items = 0
    ratings = 0
    # A server-side cursor needs a transaction; reads only.
    with transaction.atomic(), connection.chunked_cursor() as cursor:
        # Plan for the whole result, not for the first rows (the default for cursors).
        with connection.cursor() as settings_cursor:
            settings_cursor.execute("SET LOCAL cursor_tuple_fraction = 1.0")
        cursor.execute(sql, params)
        while True:
            rows = cursor.fetchmany(CHUNK_ROWS)
            if not rows:
                break
            table = np.asarray(rows, dtype=np.float64)
            coincidences.add(table)
            pairable_items += len(table)
            ratings += int(table.sum())
    alpha = alpha_from_coincidence(coincidences.matrix(), level="ordinal", values=list(VALUES))
    return {
        "alpha": None if alpha is None else float(alpha),
        "items": pairable_items,
        "judgments": ratings,
    }


def alpha_from_columns(item: np.ndarray, values: np.ndarray, *, items: int) -> Alpha:
    """The same figures from in-memory columns (used by full QC runs that already hold them)."""
    answered = (values >= 1) & (values <= 5)
    table = np.bincount(
        item[answered] * 5 + (values[answered].astype(np.int64) - 1), minlength=items * 5
    ).reshape(items, 5)
    pairable = table.sum(axis=1) >= 2
    alpha = alpha_from_coincidence(
        coincidence_from_counts(table[pairable]), level="ordinal", values=list(VALUES)
    )
    return {
        "alpha": None if alpha is None else float(alpha),
        "items": int(pairable.sum()),
        "judgments": int(table[pairable].sum()),
    }


def campaign_agreement(*, campaign: Campaign, snapshot: bool = False) -> dict[str, CampaignAlpha]:
    """Alpha per question of the campaign's candidates (controls left out), before QC (every
    judgment) and after QC (kept judgments). Optionally stored as an `AgreementSnapshot`."""
    items = CampaignCandidate.objects.filter(campaign=campaign, is_control=False)
    result: dict[str, CampaignAlpha] = {}
    for key in campaign.question_keys:
        every = agreement_for_items(items, key, kept_only=False)
        kept = agreement_for_items(items, key, kept_only=True)
        result[key] = {
            "alpha_all": every["alpha"],
            "alpha_kept": kept["alpha"],
            "items": kept["items"],
            "judgments": kept["judgments"],
            "items_all": every["items"],
            "judgments_all": every["judgments"],
        }
    if snapshot:
        agreement_snapshots_store(campaign=campaign, figures=result)
    return result


def agreement_snapshots_store(*, campaign: Campaign, figures: Mapping[str, AlphaFigures]) -> None:
    now = timezone.now()
    AgreementSnapshot.objects.bulk_create(
        [
            AgreementSnapshot(
                campaign=campaign,
                question_key=key,
                alpha_all=values["alpha_all"],
                alpha_kept=values["alpha_kept"],
                items=values["items"],
                judgments=values["judgments"],
                computed_at=now,
            )
            for key, values in figures.items()
        ]
    )
