"""PostgreSQL release reads, lines: the JSONL and CSV line of every released candidate, written by
the database itself (see export.records for the canonical form and the SQL that formats values
exactly like Python's json module)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import psycopg2.extensions

from export.reads.sql_allocation import stop_reason_sql
from export.reads.sql_snapshot import (
    T_CAMPAIGN,
    T_CAND,
    T_CLIP,
    T_JUDGMENT,
    T_PARTICIPATION,
    T_REF,
    T_SYSTEM,
    ReleaseSnapshot,
)
from export.records import (
    RecordSchema,
    sql_csv_string,
    sql_json_string,
    sql_literal,
    sql_number,
)


def prepare_fragments(
    snapshot: ReleaseSnapshot, *, pseudonyms: dict[int, str] | None, schema: RecordSchema
) -> None:
    """Per clip, the JSON and CSV pieces every candidate of the clip repeats (encoded once; the
    references only as JSON, so a row stays under PostgreSQL's TOAST threshold and is never
    compressed, and quoted for CSV per candidate);
    with raw judgments, a worker -> pseudonym table for the line query."""
    with snapshot.cursor() as cursor:
        cursor.execute("SET LOCAL extra_float_digits = 1")
        _create_fragments(cursor, snapshot)
        _create_ordered(cursor, snapshot)
        if pseudonyms is not None:
            _create_raw_judgments(cursor, snapshot, pseudonyms=pseudonyms, schema=schema)


def _create_fragments(cursor: Any, snapshot: ReleaseSnapshot) -> None:
    """The `fragments` table: per clip, its JSON and CSV pieces."""
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
                 c.image_key, c.modality,
                 -- a still image has no window: start, end and duration are null
                 CASE WHEN c.modality = 'image' THEN NULL ELSE c.start_seconds END AS start,
                 CASE WHEN c.modality = 'image' THEN NULL ELSE c.end_seconds END AS stop,
                 CASE WHEN c.modality = 'image' THEN NULL
                      ELSE COALESCE(c.duration, c.end_seconds - c.start_seconds)
                 END AS duration,
                 refs.json AS refs
          FROM {snapshot.clips} s JOIN {T_CLIP} c ON c.id = s.clip_id
            JOIN refs ON refs.clip_id = s.clip_id
        )
        SELECT clip_id, split, vatex_id,
          '"clip_id":' || {sql_json_string("vatex_id")} || ',"duration":'
            || COALESCE({sql_number("duration")}, 'null') || ',"end":'
            || COALESCE({sql_number("stop")}, 'null')
            || ',"frames_key":' || {sql_json_string("frames_key")}
            || ',"image_key":' || {sql_json_string("image_key")} || ',' AS json_head,
          '"modality":' || {sql_json_string("modality")} || ',' AS json_modality,
          refs AS json_refs,
          '"start":' || COALESCE({sql_number("start")}, 'null') || ',' AS json_start,
          '"video_key":' || {sql_json_string("video_key")} AS json_video,
          {sql_csv_string("vatex_id")} || ',' || COALESCE({sql_number("duration")}, '')
            || ',' || COALESCE({sql_number("stop")}, '') || ','
            || {sql_csv_string("frames_key")} || ',' || {sql_csv_string("image_key")}
            AS csv_head,
          {sql_csv_string("modality")} AS csv_modality,
          COALESCE({sql_number("start")}, '') AS csv_start,
          {sql_csv_string("video_key")} AS csv_video
        FROM clip
        """,
        {"unused": None},
    )
    cursor.execute(f"CREATE UNIQUE INDEX ON {snapshot.fragments} (clip_id)")


# `opened_by` as the canonical JSON text of its strings ("[]" for most candidates; PostgreSQL's
# own jsonb text has a space after each comma).
_OPENED_BY_JSON = (
    "(CASE WHEN jsonb_typeof(i.opened_by) <> 'array' OR i.opened_by = '[]'::jsonb THEN '[]'"
    " ELSE '[' || (SELECT string_agg(to_json(rule)::text, ',' ORDER BY idx)"
    " FROM jsonb_array_elements_text(i.opened_by) WITH ORDINALITY AS o(rule, idx)) || ']'"
    " END)"
)


def _create_ordered(cursor: Any, snapshot: ReleaseSnapshot) -> None:
    """The `ordered` table: file order computed once on narrow rows (row_number over the sort
    keys), so the line queries read it through an index instead of sorting their wide output
    rows. It carries each candidate's stop reason (stored, else derived: sql_allocation) and
    `opened_by` as JSON text."""
    decisions_join, stop_reason = stop_reason_sql(snapshot)
    cursor.execute(
        f"""
        CREATE TEMP TABLE {snapshot.ordered} ON COMMIT DROP AS
        SELECT i.cc_id, i.clip_id, s.split, i.overall, i.training_class, i.kept_judgments,
               i.review_state, i.means, i.calibrated_scores, i.calibrated_overall,
               {stop_reason} AS stop_reason, {_OPENED_BY_JSON} AS opened_by,
               camp.slug, cand.external_id, cand.text,
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
          {decisions_join}
        """
    )
    cursor.execute(f"CREATE UNIQUE INDEX ON {snapshot.ordered} (split, ord)")
    cursor.execute(f"ANALYZE {snapshot.ordered} (split, ord, clip_id)")
    cursor.execute(f"ANALYZE {snapshot.fragments} (clip_id, split)")


def _create_raw_judgments(
    cursor: Any, snapshot: ReleaseSnapshot, *, pseudonyms: dict[int, str], schema: RecordSchema
) -> None:
    """The `pseudonyms` table (worker -> pseudonym), then `raw`: per candidate, its kept
    judgments as one JSON array."""
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
    parts = _line_parts(snapshot, schema)
    keys = schema.question_keys
    review = "COALESCE(NULLIF(o.review_state, ''), 'none')"
    cursor = snapshot.named_cursor(f"export_split_{split}", batch_size)
    # The lines arrive as UTF-8 bytes, written as they are: no decoding and re-encoding.
    psycopg2.extensions.register_type(psycopg2.extensions.BYTES, cursor)
    with _planner_keeps_order(snapshot):
        cursor.execute(
            f"""
            SELECT
              '{{' {parts.calibrated_line_json} || '"campaign":' || j_campaign
                || ',"candidate_id":' || j_candidate || ','
                || json_head || '"judgments":' || n_judgments || ',' || json_modality
                || '"normalized":' || n_normalized {parts.opened_json}
                || ',"overall":' || n_overall || ',' {parts.raw_json} || '"references":' || json_refs
                || ',' || '"review_status":' || j_review || ',"scores":{{'
                || {parts.scores_json or "''"} || '}},' || json_start
                || '"stop_reason":' || j_stop || ',"system":' || j_system
                || ',"system_version":' || j_version || ',"text":' || j_text
                || ',"training_class":' || n_class || ',' || json_video || '}}',
              {parts.calibrated_line_csv} c_campaign || ',' || c_candidate || ',' || csv_head || ',' || n_judgments || ','
                || csv_modality || ',' || n_normalized || ',' {parts.opened_csv} || n_overall || ','
                {parts.raw_csv} || csv_refs || ','
                || c_review || ',' || {parts.scores_csv + " || ','" if keys else "''"} || csv_start
                || ',' || c_stop || ',' || c_system || ',' || c_version || ',' || c_text || ',' || n_class || ','
                || csv_video
            FROM (
                SELECT o.ord, {parts.raw_inner} {parts.means} {parts.calibrated}
                  {sql_number("o.calibrated_overall")} AS n_calibrated,
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
                  {parts.opened_inner}
                  {sql_json_string("o.stop_reason")} AS j_stop,
                  {sql_csv_string("o.stop_reason")} AS c_stop,
                  {sql_number("((o.overall - 1) / 4)")} AS n_normalized,
                  {sql_number("o.overall")} AS n_overall,
                  o.kept_judgments::text AS n_judgments,
                  o.training_class::text AS n_class,
                  f.json_head, f.json_modality, f.json_refs, f.json_start, f.json_video,
                  f.csv_head, f.csv_modality, {sql_csv_string("f.json_refs")} AS csv_refs,
                  f.csv_start, f.csv_video
                FROM {snapshot.ordered} o
                  JOIN {snapshot.fragments} f ON f.clip_id = o.clip_id
                  {parts.raw_join}
                WHERE o.split = %(split)s
                ORDER BY o.ord
                OFFSET 0
            ) row_parts
            ORDER BY ord
            """,
            {"split": split},
        )
    return cursor


@contextmanager
def _planner_keeps_order(snapshot: ReleaseSnapshot) -> Iterator[None]:
    """For the statements inside: no hash join, merge join or sort, so the plan walks the
    (split, ord) index with nested loops and keeps file order (see `split_lines`)."""
    planner = ("enable_hashjoin", "enable_mergejoin", "enable_sort")
    with snapshot.cursor() as settings_cursor:
        for setting in planner:
            settings_cursor.execute(f"SET LOCAL {setting} = off")
    try:
        yield
    finally:
        with snapshot.cursor() as settings_cursor:
            for setting in planner:
                settings_cursor.execute(f"SET LOCAL {setting} = on")


class _LineParts(NamedTuple):
    """The pieces of the line query that depend on the schema: raw judgments (a join and their
    JSON and CSV), each question's mean and calibrated score, the calibrated columns, and
    `opened_by` (only in a release with an adaptive campaign)."""

    raw_inner: str
    raw_join: str
    raw_json: str
    raw_csv: str
    means: str
    scores_json: str
    scores_csv: str
    calibrated: str
    calibrated_line_json: str
    calibrated_line_csv: str
    opened_inner: str = ""
    opened_json: str = ""
    opened_csv: str = ""


def _line_parts(snapshot: ReleaseSnapshot, schema: RecordSchema) -> _LineParts:
    keys = schema.question_keys
    raw_inner = raw_join = raw_json = raw_csv = ""
    if schema.include_raw_judgments:
        raw_join = f"LEFT JOIN {snapshot.raw} raw ON raw.cc_id = o.cc_id"
        raw_inner = "COALESCE(raw.json, '[]') AS raw_json,"
        raw_json = "|| '\"raw_judgments\":' || raw_json || ','"
        raw_csv = "|| " + sql_csv_string("raw_json") + " || ','"
    means, scores_json, scores_csv = _score_columns(keys, column="o.means", alias="m")
    calibrated, calibrated_json, calibrated_csv = _score_columns(
        keys, column="o.calibrated_scores", alias="k"
    )
    calibrated_line_json = calibrated_line_csv = ""
    if schema.include_calibration:
        calibrated_line_json = (
            "|| '\"calibrated_overall\":' || COALESCE(n_calibrated, 'null')"
            " || ',\"calibrated_scores\":{' || " + (calibrated_json or "''") + " || '},'"
        )
        calibrated_line_csv = "COALESCE(n_calibrated, '') || ',' || " + (
            calibrated_csv + " || ',' ||" if keys else ""
        )
    return _LineParts(
        raw_inner=raw_inner,
        raw_join=raw_join,
        raw_json=raw_json,
        raw_csv=raw_csv,
        means=means,
        scores_json=scores_json,
        scores_csv=scores_csv,
        calibrated=calibrated,
        calibrated_line_json=calibrated_line_json,
        calibrated_line_csv=calibrated_line_csv,
        **_opened_by_parts(schema),
    )


def _opened_by_parts(schema: RecordSchema) -> dict[str, str]:
    """The `opened_by` column's inner formatted columns, JSON member and CSV field (none when the
    schema has no allocation columns)."""
    if not schema.include_allocation:
        return {}
    return {
        "opened_inner": f"o.opened_by AS j_opened, {sql_csv_string('o.opened_by')} AS c_opened,",
        "opened_json": "|| ',\"opened_by\":' || j_opened",
        "opened_csv": "|| c_opened || ','",
    }


def _score_columns(keys: list[str], *, column: str, alias: str) -> tuple[str, str, str]:
    """Per question, a score from the JSON object `column`: the inner query's formatted columns
    (`<alias><index>`), and the outer query's JSON members and CSV fields built from them."""
    select = "".join(
        f"{sql_number(f'({column}->>{sql_literal(key)})::float8')} AS {alias}{index},"
        for index, key in enumerate(keys)
    )
    as_json = " || ',' || ".join(
        f"{sql_literal(json.dumps(key, ensure_ascii=False) + ':')}"
        f" || COALESCE({alias}{index}, 'null')"
        for index, key in enumerate(keys)
    )
    as_csv = " || ',' || ".join(f"COALESCE({alias}{index}, '')" for index in range(len(keys)))
    return select, as_json, as_csv
