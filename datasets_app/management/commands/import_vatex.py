from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.management.arguments import LIMIT
from common.management.declared import Arg
from datasets_app.management.base import ImportCommand
from datasets_app.services.imports import ImportResult, vatex_import


class Command(ImportCommand):
    """Import a VATEX annotation file ([{"videoID", "enCap", "chCap"}]): one clip per entry, the
    English captions as its ordered references. Idempotent and all-or-nothing."""

    arguments = (
        Arg("path", help="Path of the VATEX JSON file."),
        LIMIT.but(help="Import only the first N entries."),
    )

    def run_import(self, progress: Callable[[str, int, int], None], **options: Any) -> ImportResult:
        return vatex_import(path=options["path"], limit=options["limit"], progress=progress)
