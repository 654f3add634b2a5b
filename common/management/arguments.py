"""What several commands share beyond `LepusCommand`: the refusal that is also the one JSON object
of --json, a progress bar that opens once the total is known, and the --format option of the file
imports. Kept here so that the commands' messages and --help text have one source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from django.core.management.base import CommandError, CommandParser
from tqdm import tqdm

from common.management.base import LepusCommand


def refuse(
    command: LepusCommand, message: str, payload: Mapping[str, Any] | None = None
) -> NoReturn:
    """Exit non-zero with `message` on stderr; with --json, stdout still gets one object
    (`payload`, by default {"ok": false, "error": message}) so a script's parser never reads nothing."""
    if command.as_json:
        command.emit({"ok": False, "error": message} if payload is None else payload)
    raise CommandError(message)


class LazyBar:
    """A `progress(done, total)` callback whose bar opens on the first call (the total is only known
    then, and a step that reports nothing shows no bar)."""

    def __init__(self, command: LepusCommand, description: str) -> None:
        self.command = command
        self.description = description
        self.bar: tqdm | None = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = self.command.progress_bar(total=total, description=self.description)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def add_file_format_argument(parser: CommandParser) -> None:
    parser.add_argument(
        "--format",
        choices=["jsonl", "csv"],
        default=None,
        dest="file_format",
        help="The file's format (default: from the extension).",
    )


def figure(value: float | None, digits: int) -> str:
    """A statistic for the human report: "n/a" where there was too little data to compute it."""
    return "n/a" if value is None else f"{value:.{digits}f}"
