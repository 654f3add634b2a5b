"""The release record: its columns, its canonical JSON form, and the SQL that writes it.

Canonical form: every JSONL line is exactly
`json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` + "\n".
PostgreSQL writes the lines itself (the build's Python process only moves bytes), with
expressions that reproduce Python's output exactly: `to_json(text)` escapes strings like
`json.encoder.encode_basestring`, and float8 text output with `extra_float_digits = 1` is the
shortest round-trip form that Python's `repr(float)` also uses, below 1e15 in magnitude and once
whole numbers get their ".0" back. tests/export checks every line against the definition.

CSV carries the same columns in the same (sorted) order, `scores` flattened to `scores.<key>`
columns (and `calibrated_scores` to `calibrated_scores.<key>`) and `references` / `raw_judgments` /
`opened_by` as the same JSON text as in the JSONL; every string is
quoted (doubling inner quotes), numbers never are, a missing number is an empty field, lines end
with "\n". Parquet is converted from the JSONL with the fixed Arrow schema below.

Every record says its `modality`: "video", or "image" for a still image (the paper's T = 1 input),
whose `image_key` is its display JPEG and `frames_key` its one training frame, and whose `start`,
`end` and `duration` are null (a video's `image_key` is "").
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from common.spreadsheet import FORMULA_STARTS, NEUTRALISING_PREFIX

# Words for the card's statistics: after Unicode lowercasing, maximal runs of Unicode letters
# (RE2's \p{L}; in Python `[^\W\d_]+` is the same but for numeric symbols such as "½").
WORD_SPLIT_PATTERN = r"[^\p{L}]+"

# Parquet is parsed in blocks of a fixed number of lines and written in row groups of a fixed
# number of rows (a multiple of the block), so the file's bytes never depend on how the rows were
# read from the database.
PARQUET_PARSE_LINES = 5_000
PARQUET_ROW_GROUP_ROWS = 20_000
PARQUET_COMPRESSION = "zstd"
PARQUET_COMPRESSION_LEVEL = 1

# Columns with one value per question: a JSON object in JSONL, one `<name>.<key>` column in CSV.
FLATTENED_COLUMNS = ("calibrated_scores", "scores")

# Floats at or above this magnitude are refused: PostgreSQL and Python format them differently.
FLOAT_LIMIT = 1e15


def pseudonym(key: bytes, *, platform: str, external_id: str) -> str:
    """A worker's release pseudonym: HMAC-SHA256 of "<platform>:<external id>", 16 hex digits.

    The key is release-independent, so a worker keeps the same pseudonym across releases (their
    judgments and exclusions can be followed from one release to the next) while the platform id
    itself never leaves the database.
    """
    digest = hmac.new(key, f"{platform}:{external_id}".encode(), hashlib.sha256).hexdigest()
    return f"w_{digest[:16]}"


# --- SQL expressions that format values exactly like Python's json module ---------------------
def sql_number(expression: str) -> str:
    """A non-null float8 as Python's repr (3.0 -> "3.0", 0.1 -> "0.1")."""
    return (
        f"(CASE WHEN ({expression}) = trunc({expression}) THEN ({expression})::text || '.0' "
        f"ELSE ({expression})::text END)"
    )


def sql_json_string(expression: str) -> str:
    return f"to_json(({expression})::text)::text"


def sql_csv_string(expression: str) -> str:
    """A CSV text cell: quoted, inner quotes doubled, and spreadsheet-safe (an apostrophe in front
    of a text starting with a formula character: `common.spreadsheet`, the rule every CSV of the
    platform follows). Only the CSV: the JSONL and Parquet keep the exact text."""
    text = f"({expression})::text"
    starts = ", ".join(f"chr({ord(start)})" for start in FORMULA_STARTS)
    prefix = sql_literal(NEUTRALISING_PREFIX)
    return (
        f"('\"' || CASE WHEN left({text}, 1) IN ({starts}) THEN {prefix} ELSE '' END "
        f"|| replace({text}, '\"', '\"\"') || '\"')"
    )


def sql_rating(expression: str) -> str:
    """A rating stored as a JSON number: whole numbers as integers (4.0 -> "4")."""
    value = f"(({expression})::numeric)"
    return (
        f"COALESCE(CASE WHEN {value} = trunc({value}) THEN trunc({value})::text "
        f"ELSE {sql_number(f'({expression})::float8')} END, 'null')"
    )


def sql_literal(text: str) -> str:
    """A constant SQL string literal (question keys). "%" is doubled: every query that embeds one
    is executed with parameters, so psycopg2 turns "%%" back into "%"."""
    return "'" + text.replace("'", "''").replace("%", "%%") + "'"


class RecordSchema:
    """Column set of a release: fixed by the questions of its campaigns, the raw-judgment flag and
    whether any of its campaigns was calibrated (then `calibrated_overall` and
    `calibrated_scores` sit beside the raw means, null for a candidate without calibration) and
    whether any allocates judgments adaptively (then `opened_by` lists the rules that opened
    judgments beyond the minimum; `stop_reason` is in every release)."""

    def __init__(
        self,
        *,
        question_keys: Sequence[str],
        include_raw_judgments: bool,
        include_calibration: bool = False,
        include_allocation: bool = False,
    ) -> None:
        self.question_keys = sorted(question_keys)
        self.include_raw_judgments = include_raw_judgments
        self.include_calibration = include_calibration
        self.include_allocation = include_allocation

    @property
    def columns(self) -> list[str]:
        names = [
            "campaign",
            "candidate_id",
            "clip_id",
            "duration",
            "end",
            "frames_key",
            "image_key",
            "judgments",
            "modality",
            "normalized",
            "overall",
            "references",
            "review_status",
            "scores",
            "start",
            "stop_reason",
            "system",
            "system_version",
            "text",
            "training_class",
            "video_key",
        ]
        if self.include_raw_judgments:
            names.insert(names.index("references"), "raw_judgments")
        if self.include_allocation:
            names.insert(names.index("overall"), "opened_by")
        if self.include_calibration:
            names[0:0] = ["calibrated_overall", "calibrated_scores"]
        return names

    @property
    def csv_header(self) -> str:
        columns: list[str] = []
        for name in self.columns:
            if name in FLATTENED_COLUMNS:
                columns.extend(f"{name}.{key}" for key in self.question_keys)
            else:
                columns.append(name)
        return ",".join(_csv_header_cell(column) for column in columns) + "\n"

    def ratings_json_sql(self, values: str) -> str:
        parts = [
            f"{sql_literal(json.dumps(key, ensure_ascii=False) + ':')} || "
            f"{sql_rating(f'{values}->>{sql_literal(key)}')}"
            for key in self.question_keys
        ]
        return "'{' || " + (" || ',' || ".join(parts) if parts else "''") + " || '}'"

    def arrow_schema(self) -> pa.Schema:
        scores = pa.struct([pa.field(key, pa.float64()) for key in self.question_keys])
        types: dict[str, pa.DataType] = {
            "calibrated_overall": pa.float64(),
            "calibrated_scores": scores,
            "campaign": pa.string(),
            "candidate_id": pa.string(),
            "clip_id": pa.string(),
            "duration": pa.float64(),
            "end": pa.float64(),
            "frames_key": pa.string(),
            "image_key": pa.string(),
            "judgments": pa.int64(),
            "modality": pa.string(),
            "normalized": pa.float64(),
            "opened_by": pa.list_(pa.string()),
            "overall": pa.float64(),
            "references": pa.list_(pa.string()),
            "review_status": pa.string(),
            "scores": scores,
            "start": pa.float64(),
            "stop_reason": pa.string(),
            "system": pa.string(),
            "system_version": pa.string(),
            "text": pa.string(),
            "training_class": pa.int64(),
            "video_key": pa.string(),
        }
        if self.include_raw_judgments:
            values = pa.struct([pa.field(key, pa.int64()) for key in self.question_keys])
            types["raw_judgments"] = pa.list_(
                pa.struct(
                    [
                        pa.field("reason", pa.string()),
                        pa.field("values", values),
                        pa.field("worker", pa.string()),
                    ]
                )
            )
        return pa.schema([pa.field(name, types[name]) for name in self.columns])


def _csv_header_cell(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class HashingWriter:
    """A binary file that hashes what is written to it."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._handle: IO[bytes] = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._handle.write(data)
        self._hash.update(data)
        self.size += len(data)

    def close(self) -> str:
        self._handle.close()
        return self._hash.hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """Indented, key-sorted JSON with a final newline: the form of manifest.json."""
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def canonical_line(record: dict[str, Any]) -> str:
    """The definition of a JSONL line (used by tests and documentation)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
