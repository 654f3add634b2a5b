from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from datasets_app.management.base import ImportCommand
from datasets_app.services.imports import ImportResult, vatex_import


class Command(ImportCommand):
    help = (
        'Import a VATEX annotation file ([{"videoID", "enCap", "chCap"}]): one clip per entry, '
        "the English captions as its ordered references. Idempotent and all-or-nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("path", help="Path of the VATEX JSON file.")
        parser.add_argument(
            "--limit", type=int, default=None, help="Import only the first N entries."
        )

    def run_import(self, progress: Callable[[str, int, int], None], **options: Any) -> ImportResult:
        return vatex_import(path=options["path"], limit=options["limit"], progress=progress)
