"""Keyset pagination: a page is "the next N rows after this (sort value, id)", never an OFFSET.

With 1M judgments an OFFSET of 500,000 reads and throws away 500,000 rows; a keyset page reads
only its own rows whatever its depth, through an index on (sort column, id). The bound is written
as `col <= v AND (col < v OR id < i)` (descending) so that PostgreSQL can use `col <= v` as the
index condition; the OR alone would be a filter applied to a scan from the start of the index.

The cursor is base64url JSON [value, id]; it is validated like any other input (a forged cursor
answers 400, see `CursorInvalid`), and it needs no signature: it only chooses where a read starts.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from common.parsers import JSONInvalid, json_parse

PAGE_SIZES = (25, 50, 100)
DEFAULT_PAGE_SIZE = 50
MAX_CURSOR_CHARS = 600


class CursorInvalid(ValueError):
    """The `after` parameter is not a cursor this table wrote."""


@dataclass(frozen=True)
class Sort:
    """A sortable column: `key` in the URL, `field` the ORM field (or annotation) it orders by."""

    key: str
    label: str
    field: str


@dataclass(frozen=True)
class Page:
    rows: list[Any]
    next_cursor: str | None
    size: int
    is_first: bool


def cursor_encode(value: Any, pk: int) -> str:
    if hasattr(value, "isoformat"):
        value = value.isoformat()
    raw = json.dumps([value, pk], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[Any, int]:
    if len(cursor) > MAX_CURSOR_CHARS:
        raise CursorInvalid("The cursor is too long.")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, pk = json_parse(raw)
    except (binascii.Error, JSONInvalid, ValueError, TypeError) as error:
        raise CursorInvalid("The cursor is not valid.") from error
    if not isinstance(pk, int) or isinstance(pk, bool) or isinstance(value, (list, dict)):
        raise CursorInvalid("The cursor is not valid.")
    return value, pk


def keyset_page(
    queryset: QuerySet[Any], *, sort: Sort, descending: bool, after: str, size: int
) -> Page:
    """One page of `queryset` ordered by (sort.field, id), starting after the cursor `after`.

    Two queries: the page's keys first, from the filtered table alone (so PostgreSQL keeps only
    the top rows of a sort instead of sorting every row joined to its related rows: 0.8 s to
    0.2 s for 333,333 candidates by overall), then the rows of those keys with everything the
    table shows."""
    field = sort.field
    direction = "-" if descending else ""
    ordered = queryset.order_by(f"{direction}{field}", f"{direction}pk")
    if after:
        value, pk = cursor_decode(after)
        if field == "pk":
            bound = Q(pk__lt=pk) if descending else Q(pk__gt=pk)
        elif descending:
            bound = Q(**{f"{field}__lte": value}) & (Q(**{f"{field}__lt": value}) | Q(pk__lt=pk))
        else:
            bound = Q(**{f"{field}__gte": value}) & (Q(**{f"{field}__gt": value}) | Q(pk__gt=pk))
        try:
            keys = list(ordered.filter(bound).values_list(field, "pk")[: size + 1])
        except (ValidationError, ValueError, TypeError) as error:
            raise CursorInvalid("The cursor is not valid.") from error
    else:
        keys = list(ordered.values_list(field, "pk")[: size + 1])
    next_cursor = None
    if len(keys) > size:
        keys = keys[:size]
        next_cursor = cursor_encode(*keys[-1])
    by_pk = {row.pk: row for row in queryset.order_by().filter(pk__in=[pk for _, pk in keys])}
    rows = [by_pk[pk] for _, pk in keys if pk in by_pk]
    return Page(rows=rows, next_cursor=next_cursor, size=size, is_first=not after)
