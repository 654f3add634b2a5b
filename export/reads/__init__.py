"""The reads of a release build behind one interface (`ReleaseReads`, see protocol.py): streamed
SQL on PostgreSQL (postgresql.py and its sql_* sections), plain Python over the ORM elsewhere
(portable.py). `release_reads` chooses by the database in use."""

from __future__ import annotations

from collections.abc import Sequence

from common.db import is_postgresql
from export.reads.portable import PortableReleaseReads
from export.reads.postgresql import PostgresqlReleaseReads
from export.reads.protocol import ReleaseReads


def release_reads(*, tag: str, campaign_ids: Sequence[int]) -> ReleaseReads:
    """The reads of one build (not yet open: use the result as a context manager)."""
    if is_postgresql():
        return PostgresqlReleaseReads(tag=tag, campaign_ids=campaign_ids)
    return PortableReleaseReads(tag=tag, campaign_ids=campaign_ids)


__all__ = ["PortableReleaseReads", "PostgresqlReleaseReads", "ReleaseReads", "release_reads"]
