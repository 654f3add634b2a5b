"""What the import commands share: progress bars per stage on stderr, the JSON result on stdout,
and a non-zero exit with the error (file, line, field) on stderr when a file is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tqdm import tqdm

from common.management.arguments import refuse
from common.management.base import LepusCommand
from common.management.declared import Arg
from datasets_app.services.imports import ImportRejected, ImportResult

T = TypeVar("T")

DATA_FILE = Arg("path", help="A .jsonl or .csv file.")  # the generic formats' positional


class StageProgress:
    """One tqdm bar per stage ("validating", "writing judgments", ...), on stderr."""

    def __init__(self, command: LepusCommand) -> None:
        self.command = command
        self.stage: str | None = None
        self.bar: tqdm | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self.stage:
            self.close()
            self.stage = stage
            self.bar = self.command.progress_bar(total=total or None, description=stage)
        if self.bar is not None:
            if total and self.bar.total != total:
                self.bar.total = total
            self.bar.n = done
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class ImportCommand(LepusCommand):
    """Runs one import service; subclasses implement `run_import(progress, **options)`."""

    def run_import(self, progress: Callable[[str, int, int], None], **options: Any) -> ImportResult:
        raise NotImplementedError

    def staged(self, run: Callable[[StageProgress], T]) -> T:
        """`run(progress)` with stage bars; a refused file ends the command with its error."""
        progress = StageProgress(self)
        try:
            result = run(progress)
        except ImportRejected as error:
            progress.close()
            refuse(self, error.describe(), error.as_dict())
        progress.close()
        return result

    def handle(self, *args: Any, **options: Any) -> None:
        result = self.staged(lambda progress: self.run_import(progress, **options))
        payload = result.as_dict()
        self.emit(payload, human=self.describe(payload))

    @staticmethod
    def describe(payload: dict[str, Any]) -> str:
        if payload["already_imported"]:
            head = f"{payload['file']} was already imported (batch {payload['batch_id']}): nothing changed."
        else:
            head = (
                f"Imported {payload['file']} as batch {payload['batch_id']} "
                f"in {payload['seconds']:.1f} s."
            )
        lines = [head, f"sha256 {payload['sha256']}"]
        if payload.get("campaign"):
            created = " (created)" if payload.get("campaign_created") else ""
            lines.append(f"campaign {payload['campaign']}{created}")
        for table in sorted(set(payload["created"]) | set(payload["skipped"])):
            lines.append(
                f"  {table:<20} created {payload['created'].get(table, 0):>7}  "
                f"skipped {payload['skipped'].get(table, 0):>7}"
            )
        return "\n".join(lines)
