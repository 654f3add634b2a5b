"""Importers of judgments: the VATEX-EVAL file and the generic judgments format.

They read and check files with `datasets_app.services.imports` (which knows nothing of campaigns),
write clips and candidates with its writers, and write campaigns, imported raters, participations
and judgments here. Same guarantees as every import: idempotent, all-or-nothing, refusals name the
file, the line and the field (docs/import-formats.md).
"""

from __future__ import annotations

from annotation.imports.judgments import judgment_worker_external_id, judgments_import
from annotation.imports.vatex_eval import (
    VATEX_EVAL_CAMPAIGN_SLUG,
    vatex_eval_candidate_external_id,
    vatex_eval_import,
    vatex_eval_worker_external_id,
)

__all__ = [
    "VATEX_EVAL_CAMPAIGN_SLUG",
    "judgment_worker_external_id",
    "judgments_import",
    "vatex_eval_candidate_external_id",
    "vatex_eval_import",
    "vatex_eval_worker_external_id",
]
