"""What a release build reads from the database: `ReleaseReads`, streamed SQL through server-side
cursors in one REPEATABLE READ snapshot (see sql_snapshot), the queries grouped by section in
sql_selection, sql_lines, sql_statistics and sql_facts.

A build uses one instance as a context manager: the reads are valid between `__enter__` (the
snapshot opens) and `__exit__` (it closes, committing the release's records, or rolling back after
an error). The calls come in this order: `select_items`, then `question_keys`, `assign_splits`,
`check_values`, `store_records`, `worker_identities`, `prepare_fragments`, `split_lines` per split,
then the statistics, allocation and manifest facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import Any, Protocol

from export.reads import (
    sql_allocation,
    sql_explanations,
    sql_facts,
    sql_lines,
    sql_selection,
    sql_snapshot,
    sql_statistics,
)
from export.reads.sql_snapshot import ReleaseSnapshot
from export.records import RecordSchema


class LineCursor(Protocol):
    """(JSONL line, CSV line) of one split as UTF-8 bytes without newline, in file order."""

    def fetchmany(self, size: int) -> list[tuple[bytes, bytes]]: ...

    def close(self) -> None: ...


class ReleaseReads:
    """The reads of one build, all from one consistent state of the database (a dedicated
    connection, temporary tables)."""

    def __init__(self, *, tag: str, campaign_ids: Sequence[int]) -> None:
        self.tag = tag
        self.campaign_ids = list(campaign_ids)
        self._stack = ExitStack()
        self._snapshot: ReleaseSnapshot | None = None

    def __enter__(self) -> ReleaseReads:
        # Looked up at call time, so a benchmark can wrap open_snapshot to measure the backend.
        self._snapshot = self._stack.enter_context(
            sql_snapshot.open_snapshot(tag=self.tag, campaign_ids=self.campaign_ids)
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self._stack.__exit__(exc_type, exc, traceback)
        finally:
            self._snapshot = None

    @property
    def snapshot(self) -> ReleaseSnapshot:
        if self._snapshot is None:
            raise RuntimeError("the release reads are used outside their `with` block")
        return self._snapshot

    def select_items(self) -> sql_selection.Selection:
        """Choose the released candidates; count the others per reason (EXCLUSION_REASONS):
        {"excluded", "released", "candidates_in_campaigns", "per_campaign"}."""
        return sql_selection.select_items(self.snapshot)

    def question_keys(self) -> tuple[list[str], list[dict[str, Any]]]:
        """The union of the campaigns' question keys, and each campaign's facts for the manifest."""
        return sql_facts.question_keys(self.snapshot)

    def assign_splits(self, *, seed: int, ratios: Sequence[float]) -> dict[str, Any]:
        """Give every released clip one split (export.splitting's rule); describes the method."""
        return sql_selection.assign_splits(self.snapshot, seed=seed, ratios=ratios)

    def check_values(self, *, include_raw_judgments: bool) -> None:
        """Raise ValueError for values the files cannot carry faithfully."""
        sql_selection.check_values(self.snapshot, include_raw_judgments=include_raw_judgments)

    def store_records(self, *, release_id: int) -> dict[int, dict[str, int]]:
        """Write the release's ReleaseRecord rows; per split index {"candidates", "clips"}."""
        return sql_selection.store_records(self.snapshot, release_id=release_id)

    def worker_identities(self) -> dict[int, tuple[str, str]]:
        """worker pk -> (platform, external id) of everyone who took part in the campaigns."""
        return sql_facts.worker_identities(self.snapshot)

    def prepare_fragments(self, *, pseudonyms: dict[int, str] | None, schema: RecordSchema) -> None:
        """Get ready to write lines (`pseudonyms` only when raw judgments are included)."""
        sql_lines.prepare_fragments(self.snapshot, pseudonyms=pseudonyms, schema=schema)

    def split_lines(self, *, schema: RecordSchema, split: int, batch_size: int) -> LineCursor:
        """The lines of split number `split`, ordered by clip id, candidate id, campaign."""
        return sql_lines.split_lines(
            self.snapshot, schema=schema, split=split, batch_size=batch_size
        )

    def explanation_rows(self, *, batch_size: int) -> Any:
        """The kept judgments with a reason, per released candidate in file order (raw judgments
        only; after `prepare_fragments`)."""
        return sql_explanations.explanation_rows(self.snapshot, batch_size=batch_size)

    def split_statistics(self, *, splits: int) -> dict[str, Any]:
        """Per split: candidates, clips, mean overall, score bins and classes; clips overall."""
        return sql_statistics.split_statistics(self.snapshot, splits=splits)

    def judgments_and_agreement(
        self, *, question_keys: Sequence[str], batch_size: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Counts of the kept judgments and annotators, and Krippendorff's alpha per question."""
        return sql_statistics.judgments_and_agreement(
            self.snapshot, question_keys=question_keys, batch_size=batch_size
        )

    def sources(self, *, judgment_batches: Sequence[int]) -> list[dict[str, str]]:
        """The import batches the released rows came from (kind, file name, sha256)."""
        return sql_facts.sources(self.snapshot, judgment_batches=judgment_batches)

    def allocation(self) -> list[dict[str, Any]]:
        """Per campaign: its allocation policy, its metric, and the released candidates per stop
        reason and per rule that opened slots (sql_allocation)."""
        return sql_allocation.allocation_facts(self.snapshot)

    def exclusions(self) -> dict[str, Any]:
        """Excluded workers (by worker pk), judgment exclusions and review actions per campaign."""
        return sql_facts.exclusions(self.snapshot)


__all__ = ["LineCursor", "ReleaseReads"]
