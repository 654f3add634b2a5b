"""The release reads on PostgreSQL: streamed SQL in one REPEATABLE READ snapshot (see sql_snapshot),
the queries grouped by section in sql_selection, sql_lines, sql_statistics and sql_facts."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import Any

from export.reads import sql_facts, sql_lines, sql_selection, sql_snapshot, sql_statistics
from export.reads.protocol import LineCursor
from export.reads.sql_snapshot import ReleaseSnapshot
from export.records import RecordSchema


class PostgresqlReleaseReads:
    """`ReleaseReads` over one PostgreSQL snapshot (a dedicated connection, temporary tables)."""

    def __init__(self, *, tag: str, campaign_ids: Sequence[int]) -> None:
        self.tag = tag
        self.campaign_ids = list(campaign_ids)
        self._stack = ExitStack()
        self._snapshot: ReleaseSnapshot | None = None

    def __enter__(self) -> PostgresqlReleaseReads:
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

    def select_items(self) -> dict[str, Any]:
        return sql_selection.select_items(self.snapshot)

    def question_keys(self) -> tuple[list[str], list[dict[str, Any]]]:
        return sql_facts.question_keys(self.snapshot)

    def assign_splits(self, *, seed: int, ratios: Sequence[float]) -> dict[str, Any]:
        return sql_selection.assign_splits(self.snapshot, seed=seed, ratios=ratios)

    def check_values(self, *, include_raw_judgments: bool) -> None:
        sql_selection.check_values(self.snapshot, include_raw_judgments=include_raw_judgments)

    def store_records(self, *, release_id: int) -> dict[int, dict[str, int]]:
        return sql_selection.store_records(self.snapshot, release_id=release_id)

    def worker_identities(self) -> dict[int, tuple[str, str]]:
        return sql_facts.worker_identities(self.snapshot)

    def prepare_fragments(self, *, pseudonyms: dict[int, str] | None, schema: RecordSchema) -> None:
        sql_lines.prepare_fragments(self.snapshot, pseudonyms=pseudonyms, schema=schema)

    def split_lines(self, *, schema: RecordSchema, split: int, batch_size: int) -> LineCursor:
        return sql_lines.split_lines(
            self.snapshot, schema=schema, split=split, batch_size=batch_size
        )

    def split_statistics(self, *, splits: int) -> dict[str, Any]:
        return sql_statistics.split_statistics(self.snapshot, splits=splits)

    def judgments_and_agreement(
        self, *, question_keys: Sequence[str], batch_size: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        return sql_statistics.judgments_and_agreement(
            self.snapshot, question_keys=question_keys, batch_size=batch_size
        )

    def sources(self, *, judgment_batches: Sequence[int]) -> list[dict[str, str]]:
        return sql_facts.sources(self.snapshot, judgment_batches=judgment_batches)

    def exclusions(self) -> dict[str, Any]:
        return sql_facts.exclusions(self.snapshot)
