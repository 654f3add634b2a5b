"""Importers: VATEX annotation JSON, VATEX-EVAL judgments, generic candidates and judgments.

Every import is a service taking a path: idempotent (the same file twice changes nothing),
all-or-nothing (one transaction; the file is validated before anything is written), and it refuses
bad input with `ImportRejected`, which names the file, the line and the field. The formats are
documented in docs/import-formats.md.
"""

from __future__ import annotations

from datasets_app.services.imports.base import ImportRejected, ImportResult, ProgressCallback
from datasets_app.services.imports.generic import (
    candidates_import,
    derived_candidate_id,
    judgment_worker_external_id,
    judgments_import,
)
from datasets_app.services.imports.vatex import (
    VATEX_EVAL_CAMPAIGN_SLUG,
    vatex_eval_candidate_external_id,
    vatex_eval_import,
    vatex_eval_worker_external_id,
    vatex_import,
)

__all__ = [
    "VATEX_EVAL_CAMPAIGN_SLUG",
    "ImportRejected",
    "ImportResult",
    "ProgressCallback",
    "candidates_import",
    "derived_candidate_id",
    "judgment_worker_external_id",
    "judgments_import",
    "vatex_eval_candidate_external_id",
    "vatex_eval_import",
    "vatex_eval_worker_external_id",
    "vatex_import",
]
