"""Reading a release back in tests."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from django.conf import settings

from annotation.models import CampaignCandidate, ReviewState
from common import storage
from common.models import JobStatus
from export.models import Release
from export.services import release_build, release_create

# The tests written for a train/validation release keep those two splits; the service's default
# (export.splitting.DEFAULT_RATIOS) adds a test split.
TWO_SPLITS = (0.8, 0.2)


def build(**arguments: Any) -> Release:
    """Create and build a release inline (the same code the Celery task runs); ratios default to
    train/validation (`TWO_SPLITS`)."""
    arguments.setdefault("ratios", TWO_SPLITS)
    release = release_create(**arguments)
    release_build(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == JobStatus.SUCCEEDED, release.error
    return release


def release_root(release: Release) -> Path:
    return Path(settings.MEDIA_ROOT) / release.storage_prefix


def read_file(release: Release, relative: str) -> bytes:
    return storage.read_bytes(f"{release.storage_prefix}/{relative}")


def all_bytes(release: Release) -> dict[str, bytes]:
    return {relative: read_file(release, relative) for relative in release.files}


def jsonl_records(release: Release, split: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in jsonl_lines(release, split)]


def jsonl_lines(release: Release, split: str) -> list[str]:
    """The lines with their "\n" (str.splitlines would also split on U+2028 inside strings)."""
    text = read_file(release, f"data/{split}.jsonl").decode()
    return [line + "\n" for line in text.split("\n")[:-1]]


def csv_rows(release: Release, split: str) -> list[dict[str, str]]:
    text = read_file(release, f"csv/{split}.csv").decode()
    return list(csv.DictReader(io.StringIO(text)))


def parquet_rows(release: Release, split: str) -> list[dict[str, Any]]:
    return pq.read_table(release_root(release) / f"parquet/{split}.parquet").to_pylist()


def manifest(release: Release) -> dict[str, Any]:
    return json.loads(read_file(release, "manifest.json"))


def eligible(campaign: Any) -> list[CampaignCandidate]:
    """The candidates a release must hold, by the rule, computed here from the rows."""
    return [
        item
        for item in CampaignCandidate.objects.filter(campaign=campaign).select_related("candidate")
        if not item.is_control
        and item.candidate.kind == "model"
        and not item.dropped
        and item.review_state not in (ReviewState.OPEN, ReviewState.CLAIMED)
        and item.is_finalised
        and item.overall is not None
    ]
