"""Shared machinery of the importers: reading a file safely, locating errors (file, line, field),
validating values, and the result every import returns.

Every importer works in two phases. First it parses and validates the whole file into plain
specifications (nothing touches the database); then it writes them in one transaction, where the
content-level checks against what is already stored happen before anything is written. An error at
any point raises `ImportRejected`, the transaction rolls back, and the database is as it was.
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import io
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

# (stage, done, total): the bulk writer's progress callback, which a command turns into progress
# bars on stderr.
from common.bulk import ProgressCallback as ProgressCallback

# Clip ids become storage keys (`clips/<id>/video.mp4`) and file names (`<id>.mp4`), so only
# characters that are safe in both; no dots, so `<id>.<ext>` splits unambiguously.
CLIP_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
# A VATEX clip id: `<youtube id>_<start>_<end>`, split from the right (YouTube ids contain `_`).
VATEX_ID_PATTERN = re.compile(r"^(?P<source>[A-Za-z0-9_-]+)_(?P<start>\d{1,9})_(?P<end>\d{1,9})$")
SOURCE_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
# Candidate ids and rater ids travel in exports and URLs: no whitespace, a conservative alphabet.
EXTERNAL_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:/@+-]{1,300}$")


class ImportRejected(Exception):
    """A file cannot be imported; names the file, the line (when known) and the field."""

    def __init__(
        self,
        *,
        file: str,
        message: str,
        line: int | None = None,
        field: str | None = None,
        column: int | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.column = column
        self.message = message
        super().__init__(self.describe())

    def describe(self) -> str:
        where = self.file
        if self.line is not None:
            where += f", line {self.line}"
            if self.column is not None:
                where += f", column {self.column}"
        if self.field:
            where += f', field "{self.field}"'
        return f"{where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": False,
            "error": self.describe(),
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "field": self.field,
        }


class FieldError(ValueError):
    """A value is unacceptable; the caller adds the file and line."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def within(self, prefix: str) -> FieldError:
        """The same error for a field nested under `prefix` (e.g. `candidates[2]`)."""
        joined = f"{prefix}.{self.field}" if not self.field.startswith("[") else prefix + self.field
        return FieldError(joined, self.message)


@dataclass
class ImportSource:
    """A file read into memory: its bytes' sha256 and its text."""

    path: Path
    name: str
    sha256: str
    size: int
    text: str
    # Offset (in `text`) of the first byte that is not UTF-8, or None: such bytes are kept as lone
    # surrogates so that the parser can name the field that holds them.
    first_bad_offset: int | None = None
    _line_starts: list[int] | None = field(default=None, repr=False)

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset in the text."""
        if self._line_starts is None:
            self._line_starts = [0] + [match.end() for match in re.finditer("\n", self.text)]
        line_index = bisect.bisect_right(self._line_starts, offset) - 1
        return line_index + 1, offset - self._line_starts[line_index] + 1

    def reject(
        self,
        message: str,
        *,
        line: int | None = None,
        field: str | None = None,
        column: int | None = None,
    ) -> ImportRejected:
        return ImportRejected(
            file=self.name, message=message, line=line, field=field, column=column
        )

    def reject_at_offset(self, offset: int, message: str, *, field: str | None) -> ImportRejected:
        line, column = self.position(offset)
        return self.reject(message, line=line, column=column, field=field)

    def check_fully_decoded(self) -> None:
        """Raise for non-UTF-8 bytes that no field check caught (outside any known field)."""
        if self.first_bad_offset is not None:
            raise self.reject_at_offset(
                self.first_bad_offset, "the file is not valid UTF-8 text", field="(encoding)"
            )


def import_source_read(*, path: str | Path) -> ImportSource:
    """Read an import file: refuse missing or oversize files, hash the bytes, decode UTF-8."""
    file_path = Path(path)
    name = str(path)
    if not file_path.is_file():
        raise ImportRejected(file=name, message="no such file")
    size = file_path.stat().st_size
    limit = settings.LEPUS_MAX_IMPORT_BYTES
    if size > limit:
        raise ImportRejected(
            file=name,
            message=f"the file is {size} bytes, over the import limit of {limit} bytes "
            "(LEPUS_MAX_IMPORT_BYTES)",
        )
    raw = file_path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    body = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw
    first_bad_offset: int | None = None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        text = body.decode("utf-8", errors="surrogateescape")
        # Bytes before the bad one decode one-to-one into characters up to that point.
        first_bad_offset = len(body[: error.start].decode("utf-8"))
    if "\x00" in text:
        offset = text.index("\x00")
        source = ImportSource(file_path, name, digest, size, text)
        raise source.reject_at_offset(offset, "the file contains a NUL byte", field="(encoding)")
    return ImportSource(file_path, name, digest, size, text, first_bad_offset=first_bad_offset)


# --- Values ------------------------------------------------------------------------------------


def has_undecodable_bytes(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def clean_text(value: Any, *, field: str, max_chars: int | None = None) -> str:
    """A non-empty caption-like text: a string of valid UTF-8, without NUL, trimmed, bounded."""
    if not isinstance(value, str):
        raise FieldError(field, f"expected a text, got {_type_name(value)}")
    if has_undecodable_bytes(value):
        raise FieldError(field, "the text is not valid UTF-8")
    if "\x00" in value:
        raise FieldError(field, "the text contains a NUL character")
    text = value.strip()
    if not text:
        raise FieldError(field, "the text is empty")
    limit = max_chars if max_chars is not None else settings.LEPUS_MAX_CAPTION_CHARS
    if len(text) > limit:
        raise FieldError(field, f"the text has {len(text)} characters, over the limit of {limit}")
    return text


def clean_optional_text(value: Any, *, field: str, max_chars: int) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        if isinstance(value, str) and has_undecodable_bytes(value):
            raise FieldError(field, "the text is not valid UTF-8")
        return ""
    return clean_text(value, field=field, max_chars=max_chars)


def clean_identifier(value: Any, *, field: str, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str):
        raise FieldError(field, f"expected {what} (a text), got {_type_name(value)}")
    if has_undecodable_bytes(value):
        raise FieldError(field, "the text is not valid UTF-8")
    identifier = value.strip()
    if not pattern.match(identifier):
        raise FieldError(field, f"{identifier!r} is not a valid {what}")
    return identifier


@dataclass(frozen=True)
class ClipIdentity:
    vatex_id: str
    youtube_id: str
    start_seconds: float
    end_seconds: float


def parse_vatex_clip_id(value: Any, *, field: str) -> ClipIdentity:
    """`<youtube id>_<start>_<end>` split from the right: the last two `_` fields are integer
    seconds, everything before them is the YouTube id (which may itself contain `_`)."""
    clip_id = clean_identifier(value, field=field, pattern=CLIP_ID_PATTERN, what="clip id")
    match = VATEX_ID_PATTERN.match(clip_id)
    if not match:
        raise FieldError(
            field,
            f"{clip_id!r} is not a VATEX clip id (<youtube id>_<start seconds>_<end seconds>)",
        )
    start, end = int(match.group("start")), int(match.group("end"))
    if end <= start:
        raise FieldError(
            field, f"{clip_id!r}: the end ({end} s) is not after the start ({start} s)"
        )
    source = match.group("source")
    if len(source) > 100:
        raise FieldError(field, f"{clip_id!r}: the YouTube id is longer than 100 characters")
    return ClipIdentity(clip_id, source, float(start), float(end))


def clean_seconds(value: Any, *, field: str) -> float:
    if isinstance(value, bool):
        raise FieldError(field, "expected a number of seconds, got a boolean")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise FieldError(field, f"{value!r} is not a number of seconds")
    if not isinstance(value, (int, float)):
        raise FieldError(field, f"expected a number of seconds, got {_type_name(value)}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or seconds > 1e7:
        raise FieldError(field, f"{value!r} is not a valid time in seconds")
    return seconds


def clean_rating(value: Any, *, field: str, allowed: list[int]) -> int:
    """A whole number among the question's levels; 4.0 and "4" are 4, 4.5 and True are refused."""
    number: Any = value
    if isinstance(value, str):
        stripped = value.strip()
        try:
            number = int(stripped)
        except ValueError:
            try:
                number = float(stripped)
            except ValueError:
                raise FieldError(field, f"{value!r} is not a rating")
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise FieldError(field, f"expected a rating, got {_type_name(value)}")
    if isinstance(number, float):
        if not math.isfinite(number) or not number.is_integer():
            raise FieldError(field, f"the rating {value!r} is not a whole number")
        number = int(number)
    if number not in allowed:
        low, high = min(allowed), max(allowed)
        raise FieldError(field, f"the rating {value!r} is outside {low}–{high}")
    return int(number)


def clean_milliseconds(value: Any, *, field: str) -> int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise FieldError(field, f"{value!r} is not a number of milliseconds")
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise FieldError(field, f"expected milliseconds, got {_type_name(value)}")
    if not math.isfinite(number) or number < 0 or number > 7 * 24 * 3600 * 1000:
        raise FieldError(field, f"{value!r} is not a valid response time in milliseconds")
    return int(round(number))


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a text",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def first_undecodable_path(value: Any, prefix: str = "") -> str | None:
    """Where in a parsed JSON value a non-UTF-8 text sits (e.g. `chCap[3]`), or None."""
    if isinstance(value, str):
        return (prefix or "(value)") if has_undecodable_bytes(value) else None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = first_undecodable_path(item, f"{prefix}[{index}]")
            if found:
                return found
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if has_undecodable_bytes(str(key)):
                return name
            found = first_undecodable_path(item, name)
            if found:
                return found
    return None


# --- Reading structured text with positions ----------------------------------------------------

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()


def _json_error(source: ImportSource, error: json.JSONDecodeError) -> ImportRejected:
    return source.reject_at_offset(error.pos, f"invalid JSON: {error.msg}", field="(JSON syntax)")


# Python's decoder recurses once per level of nesting: a value nested some thousand levels deep
# raises RecursionError, which becomes this rejection (no import format nests more than a few).
TOO_DEEP = "invalid JSON: nested too deeply"


def _too_deep(source: ImportSource, offset: int) -> ImportRejected:
    return source.reject_at_offset(offset, TOO_DEEP, field="(JSON syntax)")


def _skip_whitespace(text: str, index: int) -> int:
    match = _WHITESPACE.match(text, index)
    return match.end() if match else index


def _open_top_level(source: ImportSource, opener: str, what: str) -> int:
    """The offset just after the top-level `opener` and the whitespace that follows it."""
    text = source.text
    index = _skip_whitespace(text, 0)
    if index >= len(text) or text[index] != opener:
        raise source.reject_at_offset(
            index, f"expected {what} at the top level", field="(JSON syntax)"
        )
    return _skip_whitespace(text, index + 1)


def iter_json_object_entries(source: ImportSource) -> Iterator[tuple[str, Any, int]]:
    """(key, value, offset of the key) of a top-level JSON object, in file order, so that errors
    can name the line and column of the entry. Duplicate keys are refused."""
    text = source.text
    index = _open_top_level(source, "{", "a JSON object ({...})")
    if index < len(text) and text[index] == "}":
        return
    seen: set[str] = set()
    while True:
        if index >= len(text) or text[index] != '"':
            raise source.reject_at_offset(index, "expected a quoted key", field="(JSON syntax)")
        try:
            key, index_after_key = _decoder.raw_decode(text, index)
        except json.JSONDecodeError as error:
            raise _json_error(source, error)
        key_offset = index
        index = _skip_whitespace(text, index_after_key)
        if index >= len(text) or text[index] != ":":
            raise source.reject_at_offset(
                index, "expected ':' after the key", field="(JSON syntax)"
            )
        value, index = _json_value(source, _skip_whitespace(text, index + 1))
        if key in seen:
            raise source.reject_at_offset(key_offset, f"the key {key!r} appears twice", field=key)
        seen.add(key)
        yield key, value, key_offset
        following = _next_item(source, index, closer="}")
        if following is None:
            return
        index = following


def iter_json_array_items(source: ImportSource) -> Iterator[tuple[int, Any, int]]:
    """(index, value, offset) of the items of a top-level JSON array, in file order."""
    text = source.text
    index = _open_top_level(source, "[", "a JSON list ([...])")
    if index < len(text) and text[index] == "]":
        _expect_end(source, index + 1)
        return
    position = 0
    while True:
        start = index
        value, index = _json_value(source, start)
        yield position, value, start
        position += 1
        following = _next_item(source, index, closer="]")
        if following is None:
            return
        index = following


def _json_value(source: ImportSource, index: int) -> tuple[Any, int]:
    """The JSON value at `index` and the index just past it (a refusal naming where it fails)."""
    try:
        value, end = _decoder.raw_decode(source.text, index)
    except json.JSONDecodeError as error:
        raise _json_error(source, error)
    except RecursionError:
        raise _too_deep(source, index)
    return value, end


def _next_item(source: ImportSource, index: int, *, closer: str) -> int | None:
    """After an item of the top-level object or list: where the next item starts (past the
    ','), or None at its closing `closer` (then nothing may follow it)."""
    text = source.text
    index = _skip_whitespace(text, index)
    if index < len(text) and text[index] == ",":
        return _skip_whitespace(text, index + 1)
    if index < len(text) and text[index] == closer:
        _expect_end(source, index + 1)
        return None
    raise source.reject_at_offset(index, f"expected ',' or '{closer}'", field="(JSON syntax)")


def _expect_end(source: ImportSource, index: int) -> None:
    index = _skip_whitespace(source.text, index)
    if index < len(source.text):
        raise source.reject_at_offset(
            index, "unexpected content after the JSON value", field="(JSON syntax)"
        )


def iter_jsonl_objects(source: ImportSource) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSON Lines file; blank lines are skipped."""
    # Split on "\n" only: str.splitlines() would also split inside strings on U+2028 and friends.
    for line_number, line in enumerate(source.text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise source.reject(
                f"invalid JSON: {error.msg}",
                line=line_number,
                column=error.colno,
                field="(JSON syntax)",
            )
        except RecursionError:
            raise source.reject(TOO_DEEP, line=line_number, field="(JSON syntax)")
        if not isinstance(value, dict):
            raise source.reject(
                f"expected one JSON object per line, got {_type_name(value)}",
                line=line_number,
                field="(JSON syntax)",
            )
        yield line_number, value


def iter_csv_rows(
    source: ImportSource,
    *,
    required: list[str],
    check_header: Callable[[list[str]], None] | None = None,
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number of the row's start, {column: value}) of a CSV file with a header row;
    `check_header` sees the column names first (and raises to refuse them)."""
    reader = csv.reader(io.StringIO(source.text, newline=""), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as error:
        raise source.reject(f"invalid CSV: {error}", line=1, field="(header)")
    if header is None:
        raise source.reject("the file is empty (a header row is required)", line=1)
    columns = [name.strip() for name in header]
    for name in columns:
        if has_undecodable_bytes(name):
            raise source.reject("a column name is not valid UTF-8", line=1, field="(header)")
        if not name:
            raise source.reject("a column has no name", line=1, field="(header)")
        if columns.count(name) > 1:
            raise source.reject(f"the column {name!r} appears twice", line=1, field=name)
    for name in required:
        if name not in columns:
            raise source.reject(f"the required column {name!r} is missing", line=1, field=name)
    if check_header is not None:
        check_header(columns)
    previous_line = reader.line_num
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise source.reject(f"invalid CSV: {error}", line=previous_line + 1)
        line_number = previous_line + 1
        previous_line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(columns):
            raise source.reject(
                f"the row has {len(row)} fields, the header has {len(columns)}", line=line_number
            )
        yield line_number, dict(zip(columns, row, strict=True))


def detect_tabular_format(source: ImportSource, explicit: str | None) -> str:
    """`jsonl` or `csv`, from --format or the file name's extension."""
    if explicit:
        if explicit not in ("jsonl", "csv"):
            raise source.reject(f"unknown format {explicit!r} (use jsonl or csv)")
        return explicit
    suffix = source.path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    raise source.reject(
        f"cannot tell the format from the extension {suffix!r}: name the file .jsonl or .csv, "
        "or pass --format"
    )


# --- Writing ------------------------------------------------------------------------------------


def chunked(items: list[Any], size: int = 1000) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class Counts:
    """Rows brought by a file per table: `created` new rows, `skipped` already stored."""

    created: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)

    def add(self, table: str, *, created: int = 0, skipped: int = 0) -> None:
        self.created[table] = self.created.get(table, 0) + created
        self.skipped[table] = self.skipped.get(table, 0) + skipped


@dataclass
class ImportResult:
    kind: str
    file: str
    sha256: str
    batch_id: int
    already_imported: bool
    created: dict[str, int]
    skipped: dict[str, int]
    campaign: str | None = None
    campaign_created: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "kind": self.kind,
            "file": self.file,
            "sha256": self.sha256,
            "batch_id": self.batch_id,
            "already_imported": self.already_imported,
            "created": dict(sorted(self.created.items())),
            "skipped": dict(sorted(self.skipped.items())),
            "campaign": self.campaign,
            "campaign_created": self.campaign_created,
            "seconds": round(self.seconds, 3),
        }
