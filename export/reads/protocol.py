"""What a release build reads from the database, as one typed interface with two implementations.

`PostgresqlReleaseReads` (export.reads.postgresql) streams SQL through server-side cursors in one
REPEATABLE READ snapshot; `PortableReleaseReads` (export.reads.portable) does the same reads in
Python over the ORM for other databases (the SQLite demo). Both give the same answers to the byte:
tests/export builds the same release through each and compares the files.

A build uses one instance as a context manager: the reads are valid between `__enter__` (the
snapshot opens) and `__exit__` (it closes, committing the release's records, or rolling back after
an error). The calls come in this order: `select_items`, then `question_keys`, `assign_splits`,
`check_values`, `store_records`, `worker_identities`, `prepare_fragments`, `split_lines` per split,
then the statistics and manifest facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, Protocol

from export.records import RecordSchema

# Why a campaign candidate is not in a release; the first that applies is counted.
EXCLUSION_REASONS = (
    "control",
    "dropped",
    "under_review",
    "below_quota",
    "not_finalised",
    "no_valid_score",
)
# How the pages and the dataset card name them.
EXCLUSION_LABELS = {
    "control": "Control captions (quality checks, never released)",
    "dropped": "Dropped by a curator",
    "under_review": "Still under expert review",
    "below_quota": "Fewer kept judgments than the campaign asks for",
    "not_finalised": "Not finalised yet (its campaign is still collecting)",
    "no_valid_score": "No valid overall score",
}


def exclusion_label(reason: str) -> str:
    return EXCLUSION_LABELS.get(reason, reason.replace("_", " "))


# annotation.questions.Rubric.IMPORTED: judgments rated under their source's own instructions.
IMPORTED_RUBRIC = "imported"


def campaign_rubric(*, rubric: str, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """A campaign's rubric for the manifest: its name and, per question, the levels its workers
    read (best first); none for imported judgments, whose raters read their source's instructions."""
    levels = {
        question["key"]: [
            {
                "value": int(level["value"]),
                "label": level.get("label", ""),
                "description": level.get("description", ""),
            }
            for level in sorted(question.get("levels") or [], key=lambda level: -level["value"])
        ]
        for question in questions
    }
    return {"rubric": rubric, "levels": {} if rubric == IMPORTED_RUBRIC else levels}


class LineCursor(Protocol):
    """(JSONL line, CSV line) of one split as UTF-8 bytes without newline, in file order."""

    def fetchmany(self, size: int) -> list[tuple[bytes, bytes]]: ...

    def close(self) -> None: ...


class ReleaseReads(Protocol):
    """The reads of one build, all from one consistent state of the database."""

    def __enter__(self) -> ReleaseReads: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def select_items(self) -> dict[str, Any]:
        """Choose the released candidates; count the others per reason (EXCLUSION_REASONS):
        {"excluded", "released", "candidates_in_campaigns", "per_campaign"}."""
        ...

    def question_keys(self) -> tuple[list[str], list[dict[str, Any]]]:
        """The union of the campaigns' question keys, and each campaign's facts for the manifest."""
        ...

    def assign_splits(self, *, seed: int, ratios: Sequence[float]) -> dict[str, Any]:
        """Give every released clip one split (export.splitting's rule); describes the method."""
        ...

    def check_values(self, *, include_raw_judgments: bool) -> None:
        """Raise ValueError for values the files cannot carry faithfully."""
        ...

    def store_records(self, *, release_id: int) -> dict[int, dict[str, int]]:
        """Write the release's ReleaseRecord rows; per split index {"candidates", "clips"}."""
        ...

    def worker_identities(self) -> dict[int, tuple[str, str]]:
        """worker pk -> (platform, external id) of everyone who took part in the campaigns."""
        ...

    def prepare_fragments(self, *, pseudonyms: dict[int, str] | None, schema: RecordSchema) -> None:
        """Get ready to write lines (`pseudonyms` only when raw judgments are included)."""
        ...

    def split_lines(self, *, schema: RecordSchema, split: int, batch_size: int) -> LineCursor:
        """The lines of split number `split`, ordered by clip id, candidate id, campaign."""
        ...

    def split_statistics(self, *, splits: int) -> dict[str, Any]:
        """Per split: candidates, clips, mean overall, score bins and classes; clips overall."""
        ...

    def judgments_and_agreement(
        self, *, question_keys: Sequence[str], batch_size: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Counts of the kept judgments and annotators, and Krippendorff's alpha per question."""
        ...

    def sources(self, *, judgment_batches: Sequence[int]) -> list[dict[str, str]]:
        """The import batches the released rows came from (kind, file name, sha256)."""
        ...

    def exclusions(self) -> dict[str, Any]:
        """Excluded workers (by worker pk), judgment exclusions and review actions per campaign."""
        ...
