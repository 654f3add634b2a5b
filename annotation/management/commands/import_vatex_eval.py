from __future__ import annotations

from collections.abc import Callable
from typing import Any

from annotation.imports import vatex_eval_import
from common.management.arguments import LIMIT
from common.management.declared import Arg
from datasets_app.management.base import ImportCommand
from datasets_app.services.imports import ImportResult


class Command(ImportCommand):
    """Import the VATEX-EVAL file (vid_cans_score_dict.json): clips, 9 references and 6 candidates
    per clip, and the ratings as imported judgments of the campaign 'vatex-eval'. Idempotent and
    all-or-nothing; see docs/import-formats.md."""

    arguments = (
        Arg("path", help="Path of vid_cans_score_dict.json."),
        LIMIT.but(help="Import only the first N clips of the file (file order)."),
    )

    def run_import(self, progress: Callable[[str, int, int], None], **options: Any) -> ImportResult:
        return vatex_eval_import(path=options["path"], limit=options["limit"], progress=progress)
