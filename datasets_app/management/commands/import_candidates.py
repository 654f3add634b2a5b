from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.management.arguments import FILE_FORMAT
from datasets_app.management.base import DATA_FILE, ImportCommand
from datasets_app.services.imports import ImportResult, candidates_import


class Command(ImportCommand):
    """Import clips, references and candidate captions (with their captioning system) from the
    generic JSONL or CSV format of docs/import-formats.md. Idempotent and all-or-nothing."""

    arguments = (DATA_FILE, FILE_FORMAT)

    def run_import(self, progress: Callable[[str, int, int], None], **options: Any) -> ImportResult:
        return candidates_import(
            path=options["path"], file_format=options["file_format"], progress=progress
        )
