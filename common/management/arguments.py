"""What several commands share beyond `LepusCommand`: the argument rows more than one command
declares, a service's domain error turned into the command's error, the refusal that is also the one
JSON object of --json, and a progress bar that opens once the total is known. Kept here so that the
commands' messages and --help text have one source."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn, TypeVar

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from tqdm import tqdm

from common.management.base import LepusCommand
from common.management.declared import Arg, flag

T = TypeVar("T")

# Rows several commands declare; a command that words the help its own way takes `.but(help=...)`.
FILE_FORMAT = Arg(
    "--format",
    choices=["jsonl", "csv"],
    default=None,
    dest="file_format",
    help="The file's format (default: from the extension).",
)
LIMIT = Arg("--limit", type=int, default=None)
SCALE = Arg("--scale", nargs=2, type=float, metavar=("LOW", "HIGH"))
DRY_RUN = flag("--dry-run")
OUT_FOLDER = Arg("--out", default=None)
OVERWRITE = flag("--overwrite")


def error_message(error: Exception) -> str:
    """What the user reads: a ValidationError's messages joined by "; ", an error that describes
    itself (a refused import: file, line, field) by `describe()`, else the error's text."""
    if isinstance(error, ValidationError):
        return "; ".join(error.messages)
    describe = getattr(error, "describe", None)
    return str(describe()) if callable(describe) else str(error)


@contextlib.contextmanager
def command_errors(*kinds: type[Exception], command: LepusCommand | None = None) -> Iterator[None]:
    """Run a service; its domain errors (`kinds`) end the command with their message. Given the
    `command`, the end is its `refuse` (with --json, stdout still gets {"ok": false, "error"})."""
    try:
        yield
    except kinds as error:
        if command is not None:
            refuse(command, error_message(error))
        raise CommandError(error_message(error)) from error


def found(row: T | None, message: str) -> T:
    """`row`, or the command ends with `message` ("no campaign with slug 'x'") when there is none."""
    if row is None:
        raise CommandError(message)
    return row


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


def figure(value: float | None, digits: int) -> str:
    """A statistic for the human report: "n/a" where there was too little data to compute it."""
    return "n/a" if value is None else f"{value:.{digits}f}"
