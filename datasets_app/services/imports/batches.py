"""Import batches: one row per imported file, created in the import's transaction; its sha256
(with the kind and target) makes a second import of the same file a no-op."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import User

from datasets_app.models import ImportBatch
from datasets_app.services.imports.base import Counts, ImportResult, ImportSource, Stopwatch


def existing_batch(*, kind: str, sha256: str, target: str) -> ImportBatch | None:
    return ImportBatch.objects.filter(kind=kind, sha256=sha256, target=target).first()


def result_for_existing_batch(
    batch: ImportBatch, source: ImportSource, watch: Stopwatch, *, campaign: str | None = None
) -> ImportResult:
    """Importing a file again changes nothing: report every row as skipped."""
    rows = batch.counts.get("rows", {}) if isinstance(batch.counts, dict) else {}
    return ImportResult(
        kind=batch.kind,
        file=source.name,
        sha256=source.sha256,
        batch_id=batch.pk,
        already_imported=True,
        created={table: 0 for table in rows},
        skipped=dict(rows),
        campaign=campaign,
        seconds=watch.seconds,
    )


def result_for_new_batch(
    batch: ImportBatch,
    source: ImportSource,
    watch: Stopwatch,
    counts: Counts,
    *,
    campaign: str | None = None,
    campaign_created: bool = False,
) -> ImportResult:
    """What an import that wrote the file as `batch` reports: the rows created and skipped."""
    return ImportResult(
        kind=batch.kind,
        file=source.name,
        sha256=source.sha256,
        batch_id=batch.pk,
        already_imported=False,
        created=counts.created,
        skipped=counts.skipped,
        campaign=campaign,
        campaign_created=campaign_created,
        seconds=watch.seconds,
    )


def finish_batch(batch: ImportBatch, counts: Counts) -> None:
    rows = {
        table: counts.created.get(table, 0) + counts.skipped.get(table, 0)
        for table in sorted(set(counts.created) | set(counts.skipped))
    }
    batch.counts = {"created": counts.created, "skipped": counts.skipped, "rows": rows}
    batch.save(update_fields=["counts"])


def create_batch(*, source: ImportSource, kind: str, target: str, user: User | None) -> ImportBatch:
    return ImportBatch.objects.create(
        kind=kind,
        file_name=Path(source.name).name[:500],
        sha256=source.sha256,
        target=target,
        created_by=user if user is not None and user.is_authenticated else None,
    )
