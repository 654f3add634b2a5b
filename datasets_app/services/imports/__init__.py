"""Importers of the data layer: VATEX annotation JSON and generic candidates (clips, references,
candidate captions), and the machinery every importer shares (reading, locating errors,
validating values, import batches, the dataset writers).

Every import is a service taking a path: idempotent (the same file twice changes nothing),
all-or-nothing (one transaction; the file is validated before anything is written), and it refuses
bad input with `ImportRejected`, which names the file, the line and the field. The formats are
documented in docs/import-formats.md. Files that carry judgments (VATEX-EVAL, generic judgments)
are imported by `annotation.imports`, which builds on this package.
"""

from __future__ import annotations

from datasets_app.services.imports.base import ImportRejected, ImportResult, ProgressCallback
from datasets_app.services.imports.candidates import candidates_import, derived_candidate_id
from datasets_app.services.imports.vatex import vatex_import

__all__ = [
    "ImportRejected",
    "ImportResult",
    "ProgressCallback",
    "candidates_import",
    "derived_candidate_id",
    "vatex_import",
]
