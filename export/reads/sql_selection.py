"""PostgreSQL release reads, selection: which candidates are released (and why the others are
not), which split each clip goes to, the release's ReleaseRecord rows, and values the files
cannot carry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from datasets_app.models import CandidateKind
from export import splitting
from export.reads.reasons import EXCLUSION_REASONS
from export.reads.sql_allocation import derive_stop_reasons
from export.reads.sql_snapshot import (
    T_CALIBRATION,
    T_CAMPAIGN,
    T_CAND,
    T_CC,
    T_CLIP,
    T_JUDGMENT,
    T_RECORD,
    ReleaseSnapshot,
)
from export.records import FLOAT_LIMIT

_ELIGIBLE = (
    "NOT (cc.is_control OR cand.kind = %(control_kind)s) AND NOT cc.dropped"
    " AND cc.review_state NOT IN ('open', 'claimed') AND cc.is_finalised"
    " AND cc.overall BETWEEN 1 AND 5"
)


class Selection(TypedDict):
    """Which candidates a release holds: how many, why the others stay out, per campaign."""

    excluded: dict[str, int]  # {exclusion reason: candidates}
    released: int
    candidates_in_campaigns: int
    per_campaign: dict[str, dict[str, int]]


def select_items(snapshot: ReleaseSnapshot) -> Selection:
    """Create the items table (the release's candidates) and the derived stop reasons of fixed
    campaigns (sql_allocation), and count what was left out and why."""
    parameters = {"campaigns": snapshot.campaign_ids, "control_kind": CandidateKind.CONTROL}
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE TEMP TABLE {snapshot.items} ON COMMIT DROP AS
            SELECT cc.id AS cc_id, cc.campaign_id, cc.candidate_id, cc.clip_id, cc.overall,
                   COALESCE(cc.training_class, floor(cc.overall + 0.5)::int) AS training_class,
                   cc.kept_judgments, cc.review_state, cc.means,
                   cc.quota, cc.rating_range, cc.stop_reason, cc.opened_by,
                   cal.scores AS calibrated_scores, cal.overall AS calibrated_overall
            FROM {T_CC} cc JOIN {T_CAND} cand ON cand.id = cc.candidate_id
            LEFT JOIN {T_CALIBRATION} cal ON cal.campaign_candidate_id = cc.id
            WHERE cc.campaign_id = ANY(%(campaigns)s) AND {_ELIGIBLE}
            """,
            parameters,
        )
        cursor.execute(f"CREATE UNIQUE INDEX ON {snapshot.items} (cc_id)")
        cursor.execute(f"ANALYZE {snapshot.items} (cc_id, clip_id, candidate_id, campaign_id)")
        derive_stop_reasons(snapshot)
        cursor.execute(
            f"""
            SELECT camp.slug,
              count(*) FILTER (WHERE cc.is_control OR cand.kind = %(control_kind)s),
              count(*) FILTER (WHERE NOT (cc.is_control OR cand.kind = %(control_kind)s)
                               AND cc.dropped),
              count(*) FILTER (WHERE NOT (cc.is_control OR cand.kind = %(control_kind)s)
                               AND NOT cc.dropped AND cc.review_state IN ('open', 'claimed')),
              count(*) FILTER (WHERE NOT (cc.is_control OR cand.kind = %(control_kind)s)
                               AND NOT cc.dropped AND cc.review_state NOT IN ('open', 'claimed')
                               AND NOT cc.is_finalised AND cc.kept_judgments < cc.quota
                               AND cc.review_state <> 'resolved'),
              count(*) FILTER (WHERE NOT (cc.is_control OR cand.kind = %(control_kind)s)
                               AND NOT cc.dropped AND cc.review_state NOT IN ('open', 'claimed')
                               AND NOT cc.is_finalised
                               AND NOT (cc.kept_judgments < cc.quota
                                        AND cc.review_state <> 'resolved')),
              count(*) FILTER (WHERE NOT (cc.is_control OR cand.kind = %(control_kind)s)
                               AND NOT cc.dropped AND cc.review_state NOT IN ('open', 'claimed')
                               AND cc.is_finalised AND NOT COALESCE(cc.overall BETWEEN 1 AND 5,
                                                                     false)),
              count(*) FILTER (WHERE {_ELIGIBLE}),
              count(*)
            FROM {T_CC} cc JOIN {T_CAND} cand ON cand.id = cc.candidate_id
                           JOIN {T_CAMPAIGN} camp ON camp.id = cc.campaign_id
            WHERE cc.campaign_id = ANY(%(campaigns)s)
            GROUP BY camp.slug ORDER BY camp.slug COLLATE "C"
            """,
            parameters,
        )
        per_campaign: dict[str, dict[str, int]] = {}
        totals = dict.fromkeys((*EXCLUSION_REASONS, "released", "candidates"), 0)
        for slug, *numbers in cursor.fetchall():
            entry = dict(zip((*EXCLUSION_REASONS, "released", "candidates"), numbers, strict=True))
            per_campaign[slug] = entry
            for key, value in entry.items():
                totals[key] += value
    return {
        "excluded": {reason: totals[reason] for reason in EXCLUSION_REASONS},
        "released": totals["released"],
        "candidates_in_campaigns": totals["candidates"],
        "per_campaign": per_campaign,
    }


def assign_splits(
    snapshot: ReleaseSnapshot, *, seed: int, ratios: Sequence[float]
) -> dict[str, Any]:
    """Give every clip of the release one split (so no clip is in two splits), by the rule of
    `export.splitting` (the same integer arithmetic, here in SQL)."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT band, count(*) FROM (
              SELECT LEAST(GREATEST(sum(training_class) / count(*), 1), 4) AS band
              FROM {snapshot.items} GROUP BY clip_id) per_clip
            GROUP BY band ORDER BY band
            """
        )
        band_sizes = {int(band): int(count) for band, count in cursor.fetchall()}
        strata = splitting.strata_of(band_sizes, ratios)
        stratum_case = " ".join(f"WHEN {band} THEN {stratum}" for band, stratum in strata.items())
        split_case = " ".join(
            f"WHEN (2 * before + n) * {bound.denominator} < 2 * total * {bound.numerator}"
            f" THEN {index}"
            for index, bound in enumerate(splitting.cumulative_bounds(ratios))
        )
        cursor.execute(
            f"""
            CREATE TEMP TABLE {snapshot.clips} ON COMMIT DROP AS
            WITH per_clip AS (
              SELECT clip_id, count(*) AS n,
                     LEAST(GREATEST(sum(training_class) / count(*), 1), 4) AS band
              FROM {snapshot.items} GROUP BY clip_id
            ), keyed AS (
              SELECT p.clip_id, p.n, CASE p.band {stratum_case} END AS stratum,
                     md5(%(seed)s || c.vatex_id) AS shuffle
              FROM per_clip p JOIN {T_CLIP} c ON c.id = p.clip_id
            ), laid AS (
              SELECT clip_id, n, stratum,
                     sum(n) OVER (PARTITION BY stratum ORDER BY shuffle COLLATE "C", clip_id
                                  ROWS UNBOUNDED PRECEDING) - n AS before,
                     sum(n) OVER (PARTITION BY stratum) AS total
              FROM keyed
            )
            SELECT clip_id, stratum,
                   (CASE {split_case} ELSE {len(ratios) - 1} END)::smallint AS split
            FROM laid
            """,
            {"seed": f"{seed}:"},
        )
        cursor.execute(f"CREATE UNIQUE INDEX ON {snapshot.clips} (clip_id)")
        cursor.execute(f"ANALYZE {snapshot.clips} (clip_id)")
    return splitting.describe(band_sizes, strata)


def store_records(snapshot: ReleaseSnapshot, *, release_id: int) -> dict[int, dict[str, int]]:
    """Write the release's ReleaseRecord rows (for comparisons); returns per split
    {"candidates", "clips"}."""
    with snapshot.cursor() as cursor:
        cursor.execute(f"DELETE FROM {T_RECORD} WHERE release_id = %s", [release_id])
        cursor.execute(
            f"""
            INSERT INTO {T_RECORD} (release_id, campaign_candidate_id, candidate_id, clip_id,
                                    split, overall, training_class, kept_judgments)
            SELECT %s, i.cc_id, i.candidate_id, i.clip_id, s.split, i.overall, i.training_class,
                   i.kept_judgments
            FROM {snapshot.items} i JOIN {snapshot.clips} s ON s.clip_id = i.clip_id
            """,
            [release_id],
        )
        cursor.execute(
            f"""
            SELECT s.split, count(*), count(DISTINCT i.clip_id)
            FROM {snapshot.items} i JOIN {snapshot.clips} s ON s.clip_id = i.clip_id
            GROUP BY s.split
            """
        )
        return {
            int(split): {"candidates": int(candidates), "clips": int(clips)}
            for split, candidates, clips in cursor.fetchall()
        }


def check_values(snapshot: ReleaseSnapshot, *, include_raw_judgments: bool) -> None:
    """Refuse values the files cannot carry faithfully (a clear error instead of odd output)."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT c.vatex_id FROM {snapshot.clips} s JOIN {T_CLIP} c ON c.id = s.clip_id
            WHERE c.start_seconds = 'NaN' OR abs(c.start_seconds) >= %(limit)s
               OR c.end_seconds = 'NaN' OR abs(c.end_seconds) >= %(limit)s
               OR c.duration = 'NaN' OR abs(c.duration) >= %(limit)s
            ORDER BY c.vatex_id COLLATE "C" LIMIT 1
            """,
            {"limit": FLOAT_LIMIT},
        )
        row = cursor.fetchone()
        if row:
            raise ValueError(f"clip {row[0]}: start, end or duration is not a usable number")
        if include_raw_judgments:
            cursor.execute(
                f"""
                SELECT j.id FROM {T_JUDGMENT} j JOIN {snapshot.items} i
                  ON i.cc_id = j.campaign_candidate_id, jsonb_each(j.values) v
                WHERE NOT j.is_excluded AND (jsonb_typeof(v.value) <> 'number'
                      OR (v.value::text)::numeric <> trunc((v.value::text)::numeric))
                LIMIT 1
                """
            )
            row = cursor.fetchone()
            if row:
                raise ValueError(f"judgment {row[0]} has a rating that is not a whole number")
