"""The one JSON parser of request bodies (a module of its own: DRF imports it while loading its
settings).

Every API view reads JSON through `JSONParser` below, and every other view that reads JSON from a
request (the preview's join and submit, the demo webhook receiver, the campaign form's custom
questions, the data browser's cursors) through `json_parse`, the same checks, so what they refuse
is refused everywhere with a 400 before any view code runs:

- nesting deeper than `MAX_JSON_DEPTH` (checked by a linear scan of the text *before* decoding:
  Python's decoder recurses once per level, and 100,000 levels raised a RecursionError, a 500);
- numbers that overflow to infinity (`1e999`): PostgreSQL's jsonb cannot store them;
- strings PostgreSQL cannot store (a NUL character, a lone UTF-16 surrogate).
"""

from __future__ import annotations

import math
import re
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.utils import json

# Deepest nesting any request body may have. Lepus's own bodies stay under 6 levels (a campaign's
# questions: list > question > levels > level).
MAX_JSON_DEPTH = 32
_SIGNIFICANT = re.compile(r'[\[\]{}"\\]')


class JSONInvalid(ValueError):
    """A JSON text `json_parse` refuses; the message says why, `detail` is the API's 400 detail."""

    @property
    def detail(self) -> str:
        return f"JSON parse error - {self}"


def json_parse(raw: bytes | str, *, encoding: str = "utf-8", strict: bool = True) -> Any:
    """Decode one JSON text with the checks of the module docstring; raises `JSONInvalid`
    (never RecursionError, never another exception) for anything it refuses."""
    try:
        text = raw.decode(encoding) if isinstance(raw, bytes) else str(raw)
    except (UnicodeDecodeError, LookupError) as error:
        raise JSONInvalid(str(error))
    if json_too_deep(text, MAX_JSON_DEPTH):
        raise JSONInvalid(f"nested deeper than {MAX_JSON_DEPTH} levels.")
    try:
        data = json.loads(
            text,
            parse_constant=json.strict_constant if strict else None,
            parse_float=_finite_float,
        )
    except RecursionError:  # the scan above makes this unreachable; never a 500 anyway
        raise JSONInvalid("nested too deeply.")
    except ValueError as error:
        raise JSONInvalid(str(error))
    problem = _unstorable_text(data)
    if problem:
        raise JSONInvalid(problem)
    return data


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser through `json_parse`."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = parsers.get_encoding(parser_context or {})  # type: ignore[attr-defined]
        raw = stream.read() if stream is not None else b""
        try:
            return json_parse(raw, encoding=encoding, strict=self.strict)
        except JSONInvalid as error:
            raise ParseError(error.detail)


def json_too_deep(text: str, limit: int) -> bool:
    """Whether the JSON text nests arrays/objects deeper than `limit`; linear in the text, no
    recursion, and brackets inside strings do not count."""
    if text.count("[") + text.count("{") <= limit:
        return False  # the usual body: too few brackets to reach the limit at all
    depth = 0
    in_string = False
    skip = -1  # index of a character escaped by a backslash
    for match in _SIGNIFICANT.finditer(text):
        index = match.start()
        if index == skip:
            continue
        char = match.group()
        if in_string:
            if char == "\\":
                skip = index + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _unstorable_text(value: Any) -> str | None:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "strings may not contain NUL (\\u0000) characters."
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "strings may not contain unpaired surrogates (\\ud800-\\udfff)."
    return None
