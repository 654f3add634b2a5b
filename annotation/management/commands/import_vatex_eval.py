from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from annotation.imports import vatex_eval_import
from datasets_app.management.base import ImportCommand
from datasets_app.services.imports import ImportResult


class Command(ImportCommand):
    help = (
        "Import the VATEX-EVAL file (vid_cans_score_dict.json): clips, 9 references and 6 "
        "candidates per clip, and the ratings as imported judgments of the campaign 'vatex-eval'. "
        "Idempotent and all-or-nothing; see docs/import-formats.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("path", help="Path of vid_cans_score_dict.json.")
        parser.add_argument(
            "--limit",
            type=int,
            default=None,
            help="Import only the first N clips of the file (file order).",
        )

    def run_import(self, progress: Callable[[str, int, int], None], **options: Any) -> ImportResult:
        return vatex_eval_import(path=options["path"], limit=options["limit"], progress=progress)
