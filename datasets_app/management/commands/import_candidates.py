from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from common.management.arguments import add_file_format_argument
from datasets_app.management.base import ImportCommand
from datasets_app.services.imports import ImportResult, candidates_import


class Command(ImportCommand):
    help = (
        "Import clips, references and candidate captions (with their captioning system) from the "
        "generic JSONL or CSV format of docs/import-formats.md. Idempotent and all-or-nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("path", help="A .jsonl or .csv file.")
        add_file_format_argument(parser)

    def run_import(self, progress: Callable[[str, int, int], None], **options: Any) -> ImportResult:
        return candidates_import(
            path=options["path"], file_format=options["file_format"], progress=progress
        )
