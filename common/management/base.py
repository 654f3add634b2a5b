"""Base class for management commands that report figures.

`--json` makes the command print exactly one JSON object on stdout; progress bars and chatter go to
stderr, so scripts can pipe stdout straight into a JSON parser. A command declares its help (the
class docstring) and its arguments (rows) as `DeclaredCommand` (common/management/declared.py) says.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from tqdm import tqdm

from common.management.declared import DeclaredCommand, Row, flag

T = TypeVar("T")


class LepusCommand(DeclaredCommand):
    arguments: ClassVar[tuple[Row, ...]] = (
        flag(
            "--json",
            dest="as_json",
            help="Print one JSON object on stdout (progress goes to stderr).",
        ),
    )

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.as_json = bool(options.get("as_json"))
        return super().execute(*args, **options)

    def progress(
        self, iterable: Iterable[T], *, total: int | None = None, description: str = ""
    ) -> Iterator[T]:
        """A progress bar on stderr (hidden when stderr is not a terminal and --json is given)."""
        disable = self.as_json and not sys.stderr.isatty()
        yield from tqdm(
            iterable,
            total=total,
            desc=description,
            file=sys.stderr,
            disable=disable,
            unit="row",
            dynamic_ncols=True,
        )

    def progress_bar(self, *, total: int | None, description: str = "") -> tqdm:
        disable = self.as_json and not sys.stderr.isatty()
        return tqdm(
            total=total, desc=description, file=sys.stderr, disable=disable, dynamic_ncols=True
        )

    def emit(self, payload: Mapping[str, object], human: str | None = None) -> None:
        """Print the result: one JSON object with --json, else the human-readable text."""
        if self.as_json:
            self.stdout.write(json.dumps(payload, sort_keys=True, default=str))
        else:
            self.stdout.write(
                human
                if human is not None
                else json.dumps(payload, indent=2, sort_keys=True, default=str)
            )

    def note(self, message: str) -> None:
        """Human chatter: stderr, so stdout stays clean JSON."""
        self.stderr.write(message)
