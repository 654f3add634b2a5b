"""The API's request parser (a module of its own: DRF imports it while loading its settings)."""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing strings PostgreSQL cannot store: a NUL character, or a lone
    UTF-16 surrogate (`"\\ud800"` is valid JSON). Without this, such a string in a JSON field
    (questions, control settings, hyper-parameters, ratings) reached the database and failed there
    with a 500; now it is a 400 before any view runs."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        problem = _unstorable_text(data)
        if problem:
            raise ParseError(f"JSON parse error - {problem}")
        return data


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
