from __future__ import annotations

from collections.abc import Callable
from typing import Any

from annotation.imports import judgments_import
from common.management.arguments import FILE_FORMAT
from common.management.declared import Arg
from datasets_app.management.base import DATA_FILE, ImportCommand
from datasets_app.services.imports import ImportResult


class Command(ImportCommand):
    """Import judgments (rater, candidate, one rating per question, optional response time and
    reason) from the generic JSONL or CSV format of docs/import-formats.md into a campaign. A
    campaign that does not exist is created as an imported campaign whose questions are the file's
    rating columns (1–5). Idempotent and all-or-nothing."""

    arguments = (
        DATA_FILE,
        Arg("--campaign", required=True, help="Slug of the campaign."),
        FILE_FORMAT,
    )

    def run_import(self, progress: Callable[[str, int, int], None], **options: Any) -> ImportResult:
        return judgments_import(
            path=options["path"],
            campaign_slug=options["campaign"],
            file_format=options["file_format"],
            progress=progress,
        )
