"""Import batches: one row per imported file, created in the import's transaction; its sha256
(with the kind and target) makes a second import of the same file a no-op."""

from __future__ import annotations

import time
from collections.abc import Callable, Sized
from pathlib import Path
from typing import TypedDict

from django.contrib.auth.models import User
from django.db import connection, transaction

from datasets_app.models import ImportBatch
from datasets_app.services.imports.base import (
    Counts,
    ImportRejected,
    ImportResult,
    ImportSource,
    import_source_read,
)

# PostgreSQL serialises concurrent imports on this advisory lock, so the content-level checks
# ("is this clip already stored?") are not raced by a second import of an overlapping file.
IMPORT_ADVISORY_LOCK = 0x1E9E5_0001


def lock_imports() -> None:
    """Serialise imports (an advisory lock held until the transaction ends)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [IMPORT_ADVISORY_LOCK])


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


def existing_batch(*, kind: str, sha256: str, target: str) -> ImportBatch | None:
    return ImportBatch.objects.filter(kind=kind, sha256=sha256, target=target).first()


def result_for_existing_batch(
    batch: ImportBatch, source: ImportSource, watch: Stopwatch, *, campaign: str | None = None
) -> ImportResult:
    """Importing a file again changes nothing: report every row as skipped."""
    rows = batch.counts.get("rows", {}) if isinstance(batch.counts, dict) else {}
    nothing_new = Counts(created={table: 0 for table in rows}, skipped=dict(rows))
    return result_for_new_batch(
        batch, source, watch, nothing_new, campaign=campaign, already_imported=True
    )


def result_for_new_batch(
    batch: ImportBatch,
    source: ImportSource,
    watch: Stopwatch,
    counts: Counts,
    *,
    campaign: str | None = None,
    campaign_created: bool = False,
    already_imported: bool = False,
) -> ImportResult:
    """What an import of the file as `batch` reports: the rows created and skipped (all skipped
    and `already_imported` where the file was imported before)."""
    return ImportResult(
        kind=batch.kind,
        file=source.name,
        sha256=source.sha256,
        batch_id=batch.pk,
        already_imported=already_imported,
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


# --- The two halves every importer shares ------------------------------------------------------
#
# An importer reads and checks the whole file first (`import_open`, then its own parsing, then
# `import_checked`), and writes nothing until every row passed; then `import_write_once` writes it
# as one batch in one transaction, or reports the earlier batch of the same file as skipped.


def import_open(
    *,
    path: str | Path,
    kind: str,
    target: str = "",
    limit: int | None = None,
    campaign: str | None = None,
) -> tuple[ImportSource, Stopwatch, ImportResult | None]:
    """Read the file; the result of its earlier import, when this file (kind, target) was
    imported before, lets the caller return at once without parsing."""
    watch = Stopwatch()
    if limit is not None and limit < 1:
        raise ImportRejected(file=str(path), message="--limit must be at least 1")
    source = import_source_read(path=path)
    existing = existing_batch(kind=kind, sha256=source.sha256, target=target)
    if existing is None:
        return source, watch, None
    return source, watch, result_for_existing_batch(existing, source, watch, campaign=campaign)


def import_checked(source: ImportSource, items: Sized, *, noun: str, complete: bool = True) -> None:
    """After parsing: the file decoded entirely (unless a limit stopped early) and held rows."""
    if complete:
        source.check_fully_decoded()
    if not len(items):
        raise source.reject(f"the file holds no {noun}")


class CampaignWritten(TypedDict):
    """What an import that writes judgments says of their campaign (fields of `ImportResult`)."""

    campaign: str
    campaign_created: bool


def import_write_once(
    *,
    source: ImportSource,
    watch: Stopwatch,
    kind: str,
    target: str,
    user: User | None,
    write: Callable[[ImportBatch, Counts], CampaignWritten | None],
    campaign: str | None = None,
) -> ImportResult:
    """Write a checked file as one batch: under the import lock, in one transaction. `write`
    writes the rows (and may return the result's `campaign` and `campaign_created`); a file
    imported meanwhile by someone else is reported as skipped instead."""
    with transaction.atomic():
        lock_imports()
        existing = existing_batch(kind=kind, sha256=source.sha256, target=target)
        if existing is not None:
            return result_for_existing_batch(existing, source, watch, campaign=campaign)
        batch = create_batch(source=source, kind=kind, target=target, user=user)
        counts = Counts()
        written = write(batch, counts)
        finish_batch(batch, counts)
    if written is None:
        return result_for_new_batch(batch, source, watch, counts, campaign=campaign)
    return result_for_new_batch(batch, source, watch, counts, **written)
