"""Everything a release reads, in one consistent database snapshot.

The build opens its own connection in a REPEATABLE READ transaction, so every query (records,
references, statistics, agreement, manifest facts) sees the same state even while workers keep
submitting judgments; progress and heartbeats go through Django's default connection in autocommit
so the dashboard and the reaper see them. Rows stream through server-side (named) cursors in
batches: memory does not grow with the size of the release.

Orderings use `COLLATE "C"` so that files do not depend on the database's locale.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg2.extensions
from django.db import connection as default_connection
from django.db import connections, transaction

from annotation.models import (
    AuditEntry,
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    Worker,
    WorkerExclusion,
)
from annotation.quality.krippendorff import alpha_from_coincidence
from datasets_app.models import (
    CandidateCaption,
    CandidateKind,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ReferenceCaption,
)
from export import splitting
from export.models import ReleaseRecord
from export.records import (
    FLOAT_LIMIT,
    RecordSchema,
    sql_csv_string,
    sql_json_string,
    sql_literal,
    sql_number,
)

T_CC = CampaignCandidate._meta.db_table
T_CAND = CandidateCaption._meta.db_table
T_SYSTEM = CaptioningSystem._meta.db_table
T_CLIP = Clip._meta.db_table
T_REF = ReferenceCaption._meta.db_table
T_CAMPAIGN = Campaign._meta.db_table
T_JUDGMENT = Judgment._meta.db_table
T_PARTICIPATION = Participation._meta.db_table
T_WORKER = Worker._meta.db_table
T_EXCLUSION = WorkerExclusion._meta.db_table
T_AUDIT = AuditEntry._meta.db_table
T_BATCH = ImportBatch._meta.db_table
T_RECORD = ReleaseRecord._meta.db_table

RATING_VALUES = (1, 2, 3, 4, 5)

# Why a campaign candidate is not in a release; the first that applies is counted.
EXCLUSION_REASONS = (
    "control",
    "dropped",
    "under_review",
    "below_quota",
    "not_finalised",
    "no_valid_score",
)


@dataclass(frozen=True)
class ReleaseSnapshot:
    """A read transaction and the temporary tables of one build."""

    cursor_factory: Any  # the raw psycopg2 connection
    items: str  # temp table: eligible campaign candidates
    clips: str  # temp table: clip -> split
    fragments: str  # temp table: per clip JSON/CSV pieces
    ordered: str  # temp table: the released candidates with everything a line needs, in order
    pseudonyms: str  # temp table: worker -> pseudonym (raw judgments only)
    raw: str  # temp table: candidate -> its kept judgments as JSON (raw judgments only)
    campaign_ids: list[int]

    def cursor(self) -> Any:
        return self.cursor_factory.cursor()

    def named_cursor(self, name: str, itersize: int) -> Any:
        cursor = self.cursor_factory.cursor(name=name)
        cursor.itersize = itersize
        return cursor


@contextmanager
def open_snapshot(*, tag: str, campaign_ids: Sequence[int]) -> Iterator[ReleaseSnapshot]:
    """A REPEATABLE READ transaction on a dedicated connection; committed when the block ends
    without error, rolled back otherwise.

    Inside an atomic block on the default connection (the test suite's transactions) the build
    reads through that connection instead, within a savepoint: its rows would be invisible to a
    second connection.
    """
    dedicated = not default_connection.in_atomic_block
    savepoint = None
    if dedicated:
        wrapper = connections.create_connection("default")
        wrapper.ensure_connection()
        raw = wrapper.connection
        raw.rollback()
        raw.set_session(isolation_level="REPEATABLE READ", readonly=False, autocommit=False)
    else:
        wrapper = None
        savepoint = transaction.savepoint()
        raw = default_connection.connection
    snapshot = ReleaseSnapshot(
        cursor_factory=raw,
        items=f"export_items_{tag}",
        clips=f"export_clips_{tag}",
        fragments=f"export_fragments_{tag}",
        ordered=f"export_ordered_{tag}",
        pseudonyms=f"export_pseudonyms_{tag}",
        raw=f"export_raw_{tag}",
        campaign_ids=sorted(campaign_ids),
    )
    try:
        with raw.cursor() as cursor:
            if dedicated:
                # Large sorts in memory; no JIT compile pauses on the big scans.
                cursor.execute("SET LOCAL work_mem = '256MB'")
                # Temporary tables of a large release stay in memory (a fresh session).
                cursor.execute("SET LOCAL temp_buffers = '256MB'")
                cursor.execute("SET LOCAL jit = off")
        yield snapshot
        with raw.cursor() as cursor:
            cursor.execute(
                f"DROP TABLE IF EXISTS {snapshot.items}, {snapshot.clips}, {snapshot.fragments},"
                f" {snapshot.ordered}, {snapshot.pseudonyms}, {snapshot.raw}"
            )
        if dedicated:
            raw.commit()
        elif savepoint is not None:
            transaction.savepoint_commit(savepoint)
    except BaseException:
        if dedicated:
            raw.rollback()
        elif savepoint is not None:
            transaction.savepoint_rollback(savepoint)
        raise
    finally:
        if wrapper is not None:
            wrapper.close()


_ELIGIBLE = (
    "NOT (cc.is_control OR cand.kind = %(control_kind)s) AND NOT cc.dropped"
    " AND cc.review_state NOT IN ('open', 'claimed') AND cc.is_finalised"
    " AND cc.overall BETWEEN 1 AND 5"
)


def select_items(snapshot: ReleaseSnapshot) -> dict[str, Any]:
    """Create the items table (the release's candidates) and count what was left out and why."""
    parameters = {"campaigns": snapshot.campaign_ids, "control_kind": CandidateKind.CONTROL}
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE TEMP TABLE {snapshot.items} ON COMMIT DROP AS
            SELECT cc.id AS cc_id, cc.campaign_id, cc.candidate_id, cc.clip_id, cc.overall,
                   COALESCE(cc.training_class, floor(cc.overall + 0.5)::int) AS training_class,
                   cc.kept_judgments, cc.review_state, cc.means
            FROM {T_CC} cc JOIN {T_CAND} cand ON cand.id = cc.candidate_id
            WHERE cc.campaign_id = ANY(%(campaigns)s) AND {_ELIGIBLE}
            """,
            parameters,
        )
        cursor.execute(f"CREATE UNIQUE INDEX ON {snapshot.items} (cc_id)")
        cursor.execute(f"ANALYZE {snapshot.items} (cc_id, clip_id, candidate_id, campaign_id)")
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


def prepare_fragments(
    snapshot: ReleaseSnapshot, *, pseudonyms: dict[int, str] | None, schema: RecordSchema
) -> None:
    """Per clip, the JSON and CSV pieces every candidate of the clip repeats (encoded once; the
    references only as JSON, so a row stays under PostgreSQL's TOAST threshold and is never
    compressed, and quoted for CSV per candidate);
    with raw judgments, a worker -> pseudonym table for the line query."""
    with snapshot.cursor() as cursor:
        cursor.execute("SET LOCAL extra_float_digits = 1")
        cursor.execute(
            f"""
            CREATE TEMP TABLE {snapshot.fragments} ON COMMIT DROP AS
            WITH refs AS (
              SELECT s.clip_id,
                     COALESCE(to_json(array_agg(r.text ORDER BY r.position, r.id)
                                      FILTER (WHERE r.id IS NOT NULL))::text, '[]') AS json
              FROM {snapshot.clips} s LEFT JOIN {T_REF} r ON r.clip_id = s.clip_id
                AND (lower(r.language) = 'en' OR lower(r.language) LIKE 'en-%%')
              GROUP BY s.clip_id
            ), clip AS (
              SELECT s.clip_id, s.split, c.vatex_id, c.video_key, c.frames_key,
                     c.start_seconds AS start,  c.end_seconds AS stop,
                     COALESCE(c.duration, c.end_seconds - c.start_seconds) AS duration,
                     refs.json AS refs
              FROM {snapshot.clips} s JOIN {T_CLIP} c ON c.id = s.clip_id
                JOIN refs ON refs.clip_id = s.clip_id
            )
            SELECT clip_id, split, vatex_id,
              '"clip_id":' || {sql_json_string("vatex_id")} || ',"duration":'
                || {sql_number("duration")} || ',"end":' || {sql_number("stop")}
                || ',"frames_key":' || {sql_json_string("frames_key")} || ',' AS json_head,
              refs AS json_refs,
              '"start":' || {sql_number("start")} || ',' AS json_start,
              '"video_key":' || {sql_json_string("video_key")} AS json_video,
              {sql_csv_string("vatex_id")} || ',' || {sql_number("duration")} || ','
                || {sql_number("stop")} || ',' || {sql_csv_string("frames_key")} AS csv_head,
              {sql_number("start")} AS csv_start,
              {sql_csv_string("video_key")} AS csv_video
            FROM clip
            """,
            {"unused": None},
        )
        cursor.execute(f"CREATE UNIQUE INDEX ON {snapshot.fragments} (clip_id)")
        # File order computed once on narrow rows (row_number over the sort keys), so the line
        # queries read it through an index instead of sorting their wide output rows.
        cursor.execute(
            f"""
            CREATE TEMP TABLE {snapshot.ordered} ON COMMIT DROP AS
            SELECT i.cc_id, i.clip_id, s.split, i.overall, i.training_class, i.kept_judgments,
                   i.review_state, i.means, camp.slug, cand.external_id, cand.text,
                   COALESCE(sys.name, '') AS system_name,
                   COALESCE(sys.version, '') AS system_version,
                   row_number() OVER (ORDER BY s.split, c.vatex_id COLLATE "C",
                                      cand.external_id COLLATE "C", camp.slug COLLATE "C") AS ord
            FROM {snapshot.items} i
              JOIN {snapshot.clips} s ON s.clip_id = i.clip_id
              JOIN {T_CLIP} c ON c.id = i.clip_id
              JOIN {T_CAND} cand ON cand.id = i.candidate_id
              LEFT JOIN {T_SYSTEM} sys ON sys.id = cand.system_id
              JOIN {T_CAMPAIGN} camp ON camp.id = i.campaign_id
            """
        )
        cursor.execute(f"CREATE UNIQUE INDEX ON {snapshot.ordered} (split, ord)")
        cursor.execute(f"ANALYZE {snapshot.ordered} (split, ord, clip_id)")
        cursor.execute(f"ANALYZE {snapshot.fragments} (clip_id, split)")
        if pseudonyms is not None:
            cursor.execute(
                f"CREATE TEMP TABLE {snapshot.pseudonyms} (worker_id bigint PRIMARY KEY,"
                " json text NOT NULL) ON COMMIT DROP"
            )
            buffer = io.StringIO()
            for worker_pk, name in pseudonyms.items():
                buffer.write(f"{worker_pk}\t{json.dumps(name)}\n")
            buffer.seek(0)
            cursor.copy_expert(f"COPY {snapshot.pseudonyms} (worker_id, json) FROM STDIN", buffer)
            cursor.execute(f"ANALYZE {snapshot.pseudonyms}")
            # Every candidate's kept judgments as one JSON array, in one grouped pass (cheaper
            # than a lookup per candidate while the lines are written).
            judgment = (
                "'{\"reason\":' || "
                + sql_json_string("j.reason")
                + " || ',\"values\":' || "
                + schema.ratings_json_sql("j.values")
                + " || ',\"worker\":' || ps.json || '}'"
            )
            cursor.execute(
                f"""
                CREATE TEMP TABLE {snapshot.raw} ON COMMIT DROP AS
                SELECT j.campaign_candidate_id AS cc_id,
                       '[' || string_agg({judgment}, ',' ORDER BY j.id) || ']' AS json
                FROM {T_JUDGMENT} j
                  JOIN {snapshot.items} i ON i.cc_id = j.campaign_candidate_id
                  JOIN {T_PARTICIPATION} p ON p.id = j.participation_id
                  JOIN {snapshot.pseudonyms} ps ON ps.worker_id = p.worker_id
                WHERE NOT j.is_excluded
                GROUP BY j.campaign_candidate_id
                """,
                {"unused": None},
            )
            cursor.execute(f"CREATE UNIQUE INDEX ON {snapshot.raw} (cc_id)")
            cursor.execute(f"ANALYZE {snapshot.raw} (cc_id)")


def split_lines(
    snapshot: ReleaseSnapshot, *, schema: RecordSchema, split: int, batch_size: int
) -> Any:
    """A named cursor over (JSONL line, CSV line) of one split as UTF-8 bytes, in file order: clip
    id, candidate id, campaign (byte order). Lines carry no newline.

    Rows come from the `ordered` table through its (split, ord) index and nested-loop lookups,
    which keep that order, so no sort of the wide output rows is needed (the planner is told not
    to hash, merge or sort for this one statement). The inner query escapes and formats every
    value once (JSON and CSV share the numbers); the outer one only concatenates.
    """
    keys = schema.question_keys
    raw_inner = raw_join = raw_json = raw_csv = ""
    if schema.include_raw_judgments:
        raw_join = f"LEFT JOIN {snapshot.raw} raw ON raw.cc_id = o.cc_id"
        raw_inner = "COALESCE(raw.json, '[]') AS raw_json,"
        raw_json = "|| '\"raw_judgments\":' || raw_json || ','"
        raw_csv = "|| " + sql_csv_string("raw_json") + " || ','"
    means = "".join(
        f"{sql_number(f'(o.means->>{sql_literal(key)})::float8')} AS m{index},"
        for index, key in enumerate(keys)
    )
    scores_json = " || ',' || ".join(
        f"{sql_literal(json.dumps(key, ensure_ascii=False) + ':')} || COALESCE(m{index}, 'null')"
        for index, key in enumerate(keys)
    )
    scores_csv = " || ',' || ".join(f"COALESCE(m{index}, '')" for index in range(len(keys)))
    review = "COALESCE(NULLIF(o.review_state, ''), 'none')"
    planner = ("enable_hashjoin", "enable_mergejoin", "enable_sort")
    with snapshot.cursor() as settings_cursor:
        for setting in planner:
            settings_cursor.execute(f"SET LOCAL {setting} = off")
    cursor = snapshot.named_cursor(f"export_split_{split}", batch_size)
    # The lines arrive as UTF-8 bytes, written as they are: no decoding and re-encoding.
    psycopg2.extensions.register_type(psycopg2.extensions.BYTES, cursor)
    try:
        cursor.execute(
            f"""
            SELECT
              '{{"campaign":' || j_campaign || ',"candidate_id":' || j_candidate || ','
                || json_head || '"judgments":' || n_judgments || ',"normalized":' || n_normalized
                || ',"overall":' || n_overall || ',' {raw_json} || '"references":' || json_refs
                || ',' || '"review_status":' || j_review || ',"scores":{{'
                || {scores_json or "''"} || '}},' || json_start || '"system":' || j_system
                || ',"system_version":' || j_version || ',"text":' || j_text
                || ',"training_class":' || n_class || ',' || json_video || '}}',
              c_campaign || ',' || c_candidate || ',' || csv_head || ',' || n_judgments || ','
                || n_normalized || ',' || n_overall || ',' {raw_csv} || csv_refs || ','
                || c_review || ',' || {scores_csv + " || ','" if keys else "''"} || csv_start
                || ',' || c_system || ',' || c_version || ',' || c_text || ',' || n_class || ','
                || csv_video
            FROM (
                SELECT o.ord, {raw_inner} {means}
                  {sql_json_string("o.slug")} AS j_campaign,
                  {sql_csv_string("o.slug")} AS c_campaign,
                  {sql_json_string("o.external_id")} AS j_candidate,
                  {sql_csv_string("o.external_id")} AS c_candidate,
                  {sql_json_string("o.text")} AS j_text,
                  {sql_csv_string("o.text")} AS c_text,
                  {sql_json_string("o.system_name")} AS j_system,
                  {sql_csv_string("o.system_name")} AS c_system,
                  {sql_json_string("o.system_version")} AS j_version,
                  {sql_csv_string("o.system_version")} AS c_version,
                  {sql_json_string(review)} AS j_review,
                  {sql_csv_string(review)} AS c_review,
                  {sql_number("((o.overall - 1) / 4)")} AS n_normalized,
                  {sql_number("o.overall")} AS n_overall,
                  o.kept_judgments::text AS n_judgments,
                  o.training_class::text AS n_class,
                  f.json_head, f.json_refs, f.json_start, f.json_video,
                  f.csv_head, {sql_csv_string("f.json_refs")} AS csv_refs, f.csv_start,
                  f.csv_video
                FROM {snapshot.ordered} o
                  JOIN {snapshot.fragments} f ON f.clip_id = o.clip_id
                  {raw_join}
                WHERE o.split = %(split)s
                ORDER BY o.ord
                OFFSET 0
            ) row_parts
            ORDER BY ord
            """,
            {"split": split},
        )
    finally:
        with snapshot.cursor() as settings_cursor:
            for setting in planner:
                settings_cursor.execute(f"SET LOCAL {setting} = on")
    return cursor


def split_statistics(snapshot: ReleaseSnapshot, *, splits: int) -> dict[str, Any]:
    """Per split: candidates, clips, mean overall (exact numeric average), histograms of the
    overall score (half-point bins) and of the training class; candidates per clip overall."""
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
            SELECT count(*), COALESCE(min(n), 0), COALESCE(max(n), 0)
            FROM (SELECT count(*) AS n FROM {snapshot.items} GROUP BY clip_id) per_clip
            """
        )
        clips, low, high = cursor.fetchone()
    return {
        "splits": per_split,
        "clips": int(clips),
        "per_clip_min": int(low),
        "per_clip_max": int(high),
    }


def question_keys(snapshot: ReleaseSnapshot) -> tuple[list[str], list[dict[str, Any]]]:
    """The union of the campaigns' question keys, and each campaign's QC facts for the manifest."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT slug, name, questions::text, overall_question_key, judgments_per_candidate,
                   reference_free, control_rate, control_settings::text, qc_rules::text,
                   review_range_threshold, min_seconds_on_clip, reason_required_at_or_below,
                   is_imported
            FROM {T_CAMPAIGN} WHERE id = ANY(%s) ORDER BY slug COLLATE "C"
            """,
            [snapshot.campaign_ids],
        )
        rows = cursor.fetchall()
    keys: set[str] = set()
    described = []
    for (
        slug,
        name,
        questions,
        overall_key,
        quota,
        reference_free,
        control_rate,
        control_settings,
        qc_rules,
        review_threshold,
        min_seconds,
        reason_at_or_below,
        is_imported,
    ) in rows:
        campaign_keys = [question["key"] for question in json.loads(questions)]
        keys.update(campaign_keys)
        described.append(
            {
                "slug": slug,
                "name": name,
                "questions": campaign_keys,
                "overall": overall_key or "mean of the questions",
                "judgments_per_candidate": quota,
                "reference_free": reference_free,
                "is_imported": is_imported,
                "quality_control": {
                    "qc_rules": json.loads(qc_rules),
                    "review_range_threshold": review_threshold,
                    "control_rate": control_rate,
                    "control_settings": json.loads(control_settings),
                    "min_seconds_on_clip": min_seconds,
                    "reason_required_at_or_below": reason_at_or_below,
                },
            }
        )
    return sorted(keys), described


def worker_identities(snapshot: ReleaseSnapshot) -> dict[int, tuple[str, str]]:
    """worker pk -> (platform, external id) of everyone who took part in the campaigns."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT DISTINCT w.id, w.platform, w.external_id
            FROM {T_WORKER} w JOIN {T_PARTICIPATION} p ON p.worker_id = w.id
            WHERE p.campaign_id = ANY(%s)
            """,
            [snapshot.campaign_ids],
        )
        return {int(pk): (platform, external) for pk, platform, external in cursor.fetchall()}


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
    parameters = {f"q{index}": key for index, key in enumerate(question_keys)}
    extracts = "".join(
        f", (j.values->>%(q{index})s)::float8 AS q{index}" for index in range(len(question_keys))
    )
    width = len(RATING_VALUES)
    shifts = np.arange(width, dtype=np.int64) * 6
    totals = {"judgments": 0, "candidates": 0, "low": None, "high": 0}

    def scan(packed: bool) -> Iterator[np.ndarray]:
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
        totals.update(judgments=0, candidates=0, low=None, high=0)
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
                totals["judgments"] += int(counts.sum())
                totals["candidates"] += len(counts)
                low, high = int(counts.min()), int(counts.max())
                totals["low"] = low if totals["low"] is None else min(totals["low"], low)
                totals["high"] = max(totals["high"], high)
                if packed and high >= 64:
                    raise _PackingOverflow
                if packed:
                    yield (table[:, 1:, None] >> shifts) & 63
                else:
                    yield table[:, 1:].reshape(len(rows), len(question_keys), width)
        finally:
            cursor.close()

    try:
        agreement = accumulate_coincidence(scan(packed=True), question_keys=question_keys)
    except _PackingOverflow:
        agreement = accumulate_coincidence(scan(packed=False), question_keys=question_keys)

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
    statistics = {
        "judgments": totals["judgments"],
        "annotators": int(annotators),
        "imported_rater_slots": int(imported_slots),
        # Candidates without a kept judgment (resolved by an expert) have no group in the scan.
        "judgments_per_candidate_min": 0
        if totals["candidates"] < released
        else int(totals["low"] or 0),
        "judgments_per_candidate_max": int(totals["high"]),
        "judgment_import_batches": batches,
    }
    return statistics, agreement


class _PackingOverflow(Exception):
    """A candidate has too many judgments for 6-bit packed counts."""


def accumulate_coincidence(
    tables: Iterable[np.ndarray], *, question_keys: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Alpha per question from batches of (items × questions × 5) count tables, accumulated as
    exact integer sums per number of ratings m: independent of batching and order."""
    width = len(RATING_VALUES)
    products: list[dict[int, np.ndarray]] = [{} for _ in question_keys]
    diagonals: list[dict[int, np.ndarray]] = [{} for _ in question_keys]
    items = [0] * len(question_keys)
    ratings = [0] * len(question_keys)
    for table in tables:
        for index in range(len(question_keys)):
            counts_table = table[:, index, :]
            per_item = counts_table.sum(axis=1)
            ratings[index] += int(per_item.sum())
            for m in np.unique(per_item[per_item >= 2]).tolist():
                chosen = counts_table[per_item == m]
                items[index] += len(chosen)
                product = chosen.T @ chosen
                diagonal = chosen.sum(axis=0)
                if m in products[index]:
                    products[index][m] += product
                    diagonals[index][m] += diagonal
                else:
                    products[index][m] = product
                    diagonals[index][m] = diagonal
    result: dict[str, dict[str, Any]] = {}
    for index, key in enumerate(question_keys):
        coincidence = np.zeros((width, width), dtype=np.float64)
        for m in sorted(products[index]):
            exact = products[index][m] - np.diag(diagonals[index][m])
            coincidence += exact.astype(np.float64) / float(m - 1)
        alpha = alpha_from_coincidence(
            coincidence, level="ordinal", values=[float(value) for value in RATING_VALUES]
        )
        result[key] = {"alpha": alpha, "items": items[index], "ratings": ratings[index]}
    return result


def sources(snapshot: ReleaseSnapshot, *, judgment_batches: Sequence[int]) -> list[dict[str, str]]:
    """Import batches the released clips, references, candidates and judgments came from."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT ib.kind, ib.file_name, ib.sha256 FROM {T_BATCH} ib WHERE ib.id IN (
              SELECT c.import_batch_id FROM {snapshot.clips} s JOIN {T_CLIP} c ON c.id = s.clip_id
              UNION SELECT r.import_batch_id FROM {snapshot.clips} s
                JOIN {T_REF} r ON r.clip_id = s.clip_id
              UNION SELECT cand.import_batch_id FROM {snapshot.items} i
                JOIN {T_CAND} cand ON cand.id = i.candidate_id
              UNION SELECT unnest(%s::bigint[]))
            ORDER BY ib.kind COLLATE "C", ib.file_name COLLATE "C", ib.sha256
            """,
            [list(judgment_batches)],
        )
        return [
            {"kind": kind, "file_name": file_name, "sha256": sha256}
            for kind, file_name, sha256 in cursor.fetchall()
        ]


def exclusions(snapshot: ReleaseSnapshot) -> dict[str, Any]:
    """Excluded workers (by worker pk, to be pseudonymised), judgment exclusions and review
    decisions of the campaigns."""
    with snapshot.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT camp.slug, p.worker_id, p.status = 'excluded',
                   COALESCE((SELECT array_agg(DISTINCT rule)
                             FROM {T_EXCLUSION} we, jsonb_array_elements_text(
                               CASE WHEN jsonb_typeof(we.rules) = 'array' THEN we.rules
                                    ELSE '[]'::jsonb END) rule
                             WHERE we.participation_id = p.id AND we.reversed_at IS NULL), '{{}}'),
                   EXISTS (SELECT 1 FROM {T_EXCLUSION} we WHERE we.participation_id = p.id
                           AND we.reversed_at IS NULL AND we.created_by_id IS NOT NULL),
                   (SELECT count(*) FROM {T_JUDGMENT} j
                     WHERE j.participation_id = p.id AND j.is_excluded),
                   COALESCE((SELECT array_agg(DISTINCT left(j.exclusion_reason, 300))
                             FROM {T_JUDGMENT} j WHERE j.participation_id = p.id
                             AND j.is_excluded AND j.exclusion_reason <> ''), '{{}}')
            FROM {T_PARTICIPATION} p JOIN {T_CAMPAIGN} camp ON camp.id = p.campaign_id
            WHERE p.campaign_id = ANY(%(campaigns)s) AND (p.status = 'excluded' OR EXISTS (
                  SELECT 1 FROM {T_EXCLUSION} we
                  WHERE we.participation_id = p.id AND we.reversed_at IS NULL))
            """,
            {"campaigns": snapshot.campaign_ids},
        )
        workers = [
            {
                "campaign": slug,
                "worker_pk": int(worker_pk),
                "participation_excluded": bool(is_excluded),
                "rules": sorted(rules),
                "by_curator": bool(by_curator),
                "judgments_excluded": int(judgments_excluded),
                "reasons": sorted(reasons),
            }
            for slug, worker_pk, is_excluded, rules, by_curator, judgments_excluded, reasons in (
                cursor.fetchall()
            )
        ]
        cursor.execute(
            f"""
            SELECT camp.slug, j.excluded_by, count(*)
            FROM {T_JUDGMENT} j JOIN {T_CAMPAIGN} camp ON camp.id = j.campaign_id
            WHERE j.campaign_id = ANY(%s) AND j.is_excluded
            GROUP BY camp.slug, j.excluded_by
            ORDER BY camp.slug COLLATE "C", j.excluded_by COLLATE "C"
            """,
            [snapshot.campaign_ids],
        )
        judgment_exclusions: dict[str, dict[str, int]] = {}
        for slug, excluded_by, count in cursor.fetchall():
            judgment_exclusions.setdefault(slug, {})[excluded_by or "unspecified"] = int(count)
        cursor.execute(
            f"""
            SELECT camp.slug, ae.action, count(*)
            FROM {T_AUDIT} ae JOIN {T_CAMPAIGN} camp ON camp.id = ae.campaign_id
            WHERE ae.campaign_id = ANY(%s)
            GROUP BY camp.slug, ae.action ORDER BY camp.slug COLLATE "C", ae.action COLLATE "C"
            """,
            [snapshot.campaign_ids],
        )
        audit: dict[str, dict[str, int]] = {}
        for slug, action, count in cursor.fetchall():
            audit.setdefault(slug, {})[action] = int(count)
    return {"workers": workers, "judgment_exclusions": judgment_exclusions, "audit": audit}
