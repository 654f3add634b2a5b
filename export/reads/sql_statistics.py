"""PostgreSQL release reads, statistics: per split counts and histograms, and one scan of the kept
judgments for their counts and Krippendorff's alpha."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from export.reads.sql_snapshot import (
    T_CLIP,
    T_JUDGMENT,
    T_PARTICIPATION,
    T_WORKER,
    ReleaseSnapshot,
)
from export.statistics import RATING_VALUES, accumulate_coincidence


def split_statistics(snapshot: ReleaseSnapshot, *, splits: int) -> dict[str, Any]:
    """Per split: candidates, clips, mean overall (exact numeric average), histograms of the
    overall score (half-point bins) and of the training class; candidates per clip overall, and
    how many of the clips are still images."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT s.split, count(*), count(DISTINCT i.clip_id), round(avg(i.overall::numeric), 12)
            FROM {snapshot.items} i JOIN {snapshot.clips} s ON s.clip_id = i.clip_id
            GROUP BY s.split
            """
        )
        per_split: dict[int, dict[str, Any]] = {
            index: {
                "candidates": 0,
                "clips": 0,
                "mean_overall": None,
                "bins": [0] * 8,
                "classes": [0] * 5,
            }
            for index in range(splits)
        }
        for split, candidates, clips, mean in cursor.fetchall():
            per_split[split].update(
                candidates=int(candidates),
                clips=int(clips),
                mean_overall=float(mean) if mean is not None else None,
            )
        cursor.execute(
            f"""
            SELECT s.split, LEAST(GREATEST(floor((i.overall - 1) / 0.5)::int, 0), 7), count(*)
            FROM {snapshot.items} i JOIN {snapshot.clips} s ON s.clip_id = i.clip_id
            GROUP BY 1, 2
            """
        )
        for split, bin_index, count in cursor.fetchall():
            per_split[split]["bins"][bin_index] = int(count)
        cursor.execute(
            f"""
            SELECT s.split, i.training_class, count(*)
            FROM {snapshot.items} i JOIN {snapshot.clips} s ON s.clip_id = i.clip_id
            WHERE i.training_class BETWEEN 1 AND 5 GROUP BY 1, 2
            """
        )
        for split, training_class, count in cursor.fetchall():
            per_split[split]["classes"][training_class - 1] = int(count)
        cursor.execute(
            f"""
            SELECT count(*), COALESCE(min(n), 0), COALESCE(max(n), 0),
                   count(*) FILTER (WHERE c.modality = 'image')
            FROM (SELECT clip_id, count(*) AS n FROM {snapshot.items} GROUP BY clip_id) per_clip
              JOIN {T_CLIP} c ON c.id = per_clip.clip_id
            """
        )
        clips, low, high, images = cursor.fetchone()
    return {
        "splits": per_split,
        "clips": int(clips),
        "images": int(images),
        "per_clip_min": int(low),
        "per_clip_max": int(high),
    }


def judgments_and_agreement(
    snapshot: ReleaseSnapshot, *, question_keys: Sequence[str], batch_size: int
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One scan of the kept judgments of the released candidates: how many (in all and per
    candidate), and Krippendorff's alpha (ordinal, 1..5) per question; then who gave them.

    The scan groups by candidate; for each question the database packs the candidate's five
    value counts into one integer (6 bits each), about twice as fast as five separate counts.
    Should a candidate have 64 or more kept judgments (a count could overflow its 6 bits), the
    scan is repeated with plain counts. Alpha is accumulated exactly (see
    `accumulate_coincidence`), so it does not depend on batching or order.
    """
    totals = _ScanTotals()
    try:
        agreement = accumulate_coincidence(
            _scan(snapshot, question_keys, batch_size, totals, packed=True),
            question_keys=question_keys,
        )
    except _PackingOverflow:
        agreement = accumulate_coincidence(
            _scan(snapshot, question_keys, batch_size, totals, packed=False),
            question_keys=question_keys,
        )
    released, annotators, imported_slots, batches = _judgment_sources(snapshot)
    statistics = {
        "judgments": totals.judgments,
        "annotators": int(annotators),
        "imported_rater_slots": int(imported_slots),
        # Candidates without a kept judgment (resolved by an expert) have no group in the scan.
        "judgments_per_candidate_min": 0 if totals.candidates < released else int(totals.low or 0),
        "judgments_per_candidate_max": int(totals.high),
        "judgment_import_batches": batches,
    }
    return statistics, agreement


@dataclass
class _ScanTotals:
    """Kept judgments counted by the scan: in all, candidates, and the fewest and most per
    candidate (reset when the scan starts again with plain counts)."""

    judgments: int = 0
    candidates: int = 0
    low: int | None = None
    high: int = 0


def _scan(
    snapshot: ReleaseSnapshot,
    question_keys: Sequence[str],
    batch_size: int,
    totals: _ScanTotals,
    *,
    packed: bool,
) -> Iterator[np.ndarray]:
    """Per batch of candidates, each question's counts of the values 1..5 (candidates x
    questions x 5), counting into `totals`. Raises `_PackingOverflow` when packed counts could
    overflow."""
    parameters = {f"q{index}": key for index, key in enumerate(question_keys)}
    extracts = "".join(
        f", (j.values->>%(q{index})s)::float8 AS q{index}" for index in range(len(question_keys))
    )
    width = len(RATING_VALUES)
    shifts = np.arange(width, dtype=np.int64) * 6
    if packed:
        aggregates = "".join(
            f", sum(CASE WHEN q{index} IN (1, 2, 3, 4, 5) THEN 1 << (6 * (q{index}::int - 1))"
            " ELSE 0 END)"
            for index in range(len(question_keys))
        )
    else:
        aggregates = "".join(
            f", count(*) FILTER (WHERE q{index} = {value})"
            for index in range(len(question_keys))
            for value in RATING_VALUES
        )
    totals.judgments, totals.candidates, totals.low, totals.high = 0, 0, None, 0
    cursor = snapshot.named_cursor("export_release_judgments", batch_size)
    try:
        cursor.execute(
            f"""
            SELECT count(*) {aggregates}
            FROM (SELECT j.campaign_candidate_id AS cc_id {extracts}
                  FROM {T_JUDGMENT} j
                    JOIN {snapshot.items} i ON i.cc_id = j.campaign_candidate_id
                  WHERE NOT j.is_excluded) kept
            GROUP BY cc_id
            """,
            parameters,
        )
        while rows := cursor.fetchmany(batch_size):
            table = np.asarray(rows, dtype=np.int64)
            counts = table[:, 0]
            totals.judgments += int(counts.sum())
            totals.candidates += len(counts)
            low, high = int(counts.min()), int(counts.max())
            totals.low = low if totals.low is None else min(totals.low, low)
            totals.high = max(totals.high, high)
            if packed and high >= 64:
                raise _PackingOverflow
            if packed:
                yield (table[:, 1:, None] >> shifts) & 63
            else:
                yield table[:, 1:].reshape(len(rows), len(question_keys), width)
    finally:
        cursor.close()


def _judgment_sources(snapshot: ReleaseSnapshot) -> tuple[int, int, int, list[int]]:
    """(released candidates, annotators, imported rater slots, import batches) of the kept
    judgments."""
    with snapshot.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {snapshot.items}")
        (released,) = cursor.fetchone()
        # Who: one index probe per participation, not another scan of the judgments.
        cursor.execute(
            f"""
            SELECT count(DISTINCT p.worker_id),
                   count(DISTINCT p.worker_id) FILTER (WHERE w.platform = 'imported')
            FROM {T_PARTICIPATION} p JOIN {T_WORKER} w ON w.id = p.worker_id
            WHERE p.campaign_id = ANY(%(campaigns)s) AND EXISTS (
              SELECT 1 FROM {T_JUDGMENT} j JOIN {snapshot.items} i
                ON i.cc_id = j.campaign_candidate_id
              WHERE j.campaign_id = p.campaign_id AND j.participation_id = p.id
                AND NOT j.is_excluded)
            """,
            {"campaigns": snapshot.campaign_ids},
        )
        annotators, imported_slots = cursor.fetchone()
        # The import batches of the campaigns' kept judgments: a walk over the batch index.
        cursor.execute(
            f"""
            WITH RECURSIVE batches(id) AS (
              SELECT min(import_batch_id) FROM {T_JUDGMENT}
              WHERE import_batch_id IS NOT NULL AND campaign_id = ANY(%(campaigns)s)
                AND NOT is_excluded
              UNION ALL
              SELECT (SELECT min(import_batch_id) FROM {T_JUDGMENT}
                      WHERE import_batch_id > batches.id AND campaign_id = ANY(%(campaigns)s)
                        AND NOT is_excluded)
              FROM batches WHERE batches.id IS NOT NULL
            )
            SELECT id FROM batches WHERE id IS NOT NULL
            """,
            {"campaigns": snapshot.campaign_ids},
        )
        batches = sorted(int(row[0]) for row in cursor.fetchall())
    return released, annotators, imported_slots, batches


class _PackingOverflow(Exception):
    """A candidate has too many judgments for 6-bit packed counts."""
