"""The PostgreSQL release reads' snapshot: one consistent state of the database for a whole build.

The build opens its own connection in a REPEATABLE READ transaction, so every query (records,
references, statistics, agreement, manifest facts) sees the same state even while workers keep
submitting judgments; progress and heartbeats go through Django's default connection in autocommit
so the dashboard and the reaper see them. Rows stream through server-side (named) cursors in
batches: memory does not grow with the size of the release.

The queries live beside this module by section: `sql_selection` (which candidates, which split),
`sql_lines` (the records' lines), `sql_statistics` (statistics and agreement) and `sql_facts` (the
manifest's facts). Orderings use `COLLATE "C"` so that files do not depend on the database's
locale.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection as default_connection
from django.db import connections, transaction

from annotation.models import (
    AuditEntry,
    Campaign,
    CampaignCandidate,
    CandidateCalibration,
    Judgment,
    Participation,
    Worker,
    WorkerExclusion,
)
from datasets_app.models import (
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ReferenceCaption,
)
from export.models import ReleaseRecord

T_CC = CampaignCandidate._meta.db_table
T_CALIBRATION = CandidateCalibration._meta.db_table
T_CAND = CandidateCaption._meta.db_table
T_SYSTEM = CaptioningSystem._meta.db_table
T_CLIP = Clip._meta.db_table
T_REF = ReferenceCaption._meta.db_table
T_CAMPAIGN = Campaign._meta.db_table
T_JUDGMENT = Judgment._meta.db_table
T_PARTICIPATION = Participation._meta.db_table
T_WORKER = Worker._meta.db_table
T_EXCLUSION = WorkerExclusion._meta.db_table
T_AUDIT = AuditEntry._meta.db_table
T_BATCH = ImportBatch._meta.db_table
T_RECORD = ReleaseRecord._meta.db_table


@dataclass(frozen=True)
class ReleaseSnapshot:
    """A read transaction and the temporary tables of one build."""

    cursor_factory: Any  # the raw psycopg2 connection
    items: str  # temp table: eligible campaign candidates
    clips: str  # temp table: clip -> split
    fragments: str  # temp table: per clip JSON/CSV pieces
    ordered: str  # temp table: the released candidates with everything a line needs, in order
    pseudonyms: str  # temp table: worker -> pseudonym (raw judgments only)
    raw: str  # temp table: candidate -> its kept judgments as JSON (raw judgments only)
    decisions: str  # temp table: a fixed campaign's derived stop reasons (sql_allocation)
    campaign_ids: list[int]

    def cursor(self) -> Any:
        return self.cursor_factory.cursor()

    def named_cursor(self, name: str, itersize: int) -> Any:
        cursor = self.cursor_factory.cursor(name=name)
        cursor.itersize = itersize
        return cursor


@contextmanager
def open_snapshot(*, tag: str, campaign_ids: Sequence[int]) -> Iterator[ReleaseSnapshot]:
    """A REPEATABLE READ transaction on a dedicated connection; committed when the block ends
    without error, rolled back otherwise.

    Inside an atomic block on the default connection (the test suite's transactions) the build
    reads through that connection instead, within a savepoint: its rows would be invisible to a
    second connection.
    """
    dedicated = not default_connection.in_atomic_block
    savepoint = None
    if dedicated:
        wrapper = connections.create_connection("default")
        wrapper.ensure_connection()
        raw = wrapper.connection
        raw.rollback()
        raw.set_session(isolation_level="REPEATABLE READ", readonly=False, autocommit=False)
    else:
        wrapper = None
        savepoint = transaction.savepoint()
        raw = default_connection.connection
    snapshot = ReleaseSnapshot(
        cursor_factory=raw,
        items=f"export_items_{tag}",
        clips=f"export_clips_{tag}",
        fragments=f"export_fragments_{tag}",
        ordered=f"export_ordered_{tag}",
        pseudonyms=f"export_pseudonyms_{tag}",
        raw=f"export_raw_{tag}",
        decisions=f"export_decisions_{tag}",
        campaign_ids=sorted(campaign_ids),
    )
    try:
        with raw.cursor() as cursor:
            if dedicated:
                # Large sorts in memory; no JIT compile pauses on the big scans.
                cursor.execute("SET LOCAL work_mem = '256MB'")
                # Temporary tables of a large release stay in memory (a fresh session).
                cursor.execute("SET LOCAL temp_buffers = '256MB'")
                cursor.execute("SET LOCAL jit = off")
        yield snapshot
        with raw.cursor() as cursor:
            cursor.execute(
                f"DROP TABLE IF EXISTS {snapshot.items}, {snapshot.clips}, {snapshot.fragments},"
                f" {snapshot.ordered}, {snapshot.pseudonyms}, {snapshot.raw},"
                f" {snapshot.decisions}"
            )
        if dedicated:
            raw.commit()
        elif savepoint is not None:
            transaction.savepoint_commit(savepoint)
    except BaseException:
        if dedicated:
            raw.rollback()
        elif savepoint is not None:
            transaction.savepoint_rollback(savepoint)
        raise
    finally:
        if wrapper is not None:
            wrapper.close()
