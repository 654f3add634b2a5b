"""Reads of releases: listings, download links and what changed between two releases."""

from __future__ import annotations

import json
import os
from typing import Any, TypedDict

from django.core.cache import cache
from django.db import connection
from django.db.models import QuerySet

from annotation.models import Campaign, CampaignCandidate
from common import storage
from common.models import JobStatus
from datasets_app.models import CandidateCaption
from export.models import SPLIT_NAMES, Release, ReleaseRecord

T_RECORD = ReleaseRecord._meta.db_table
T_CC = CampaignCandidate._meta.db_table
T_CAND = CandidateCaption._meta.db_table
T_CAMPAIGN = Campaign._meta.db_table

# Buckets of the overall-score shift of candidates in both releases (new - old).
SHIFT_BUCKETS = (
    ("< -1", None, -1.0),
    ("-1 to -0.5", -1.0, -0.5),
    ("-0.5 to 0", -0.5, 0.0),
    ("0 to 0.5", 0.0, 0.5),
    ("0.5 to 1", 0.5, 1.0),
    ("> 1", 1.0, None),
)


def release_list(*, user: Any, status: str | None = None) -> QuerySet[Release]:
    """Releases a curator may see: published ones by default; `status="all"` or a job status
    lists builds too. Curators see every release (releases are not owned)."""
    queryset = Release.objects.prefetch_related("campaigns").select_related("created_by")
    if status in (None, "", JobStatus.SUCCEEDED):
        return queryset.published()
    if status == "all":
        return queryset
    return queryset.filter(status=status)


def release_builds() -> QuerySet[Release]:
    """Releases that are not (yet) published: queued, running, failed or cancelled builds."""
    return (
        Release.objects.exclude(status=JobStatus.SUCCEEDED)
        .prefetch_related("campaigns")
        .select_related("created_by")
    )


def release_download_name(*, release: Release, relative: str) -> str:
    safe_name = "".join(char if char.isalnum() or char in "-_." else "-" for char in release.name)
    return f"{safe_name}-{relative.replace('/', '-')}"


class ReleaseFile(TypedDict):
    path: str
    sha256: str
    url: str | None
    format: str


def release_files(*, release: Release, with_urls: bool = True) -> list[ReleaseFile]:
    """The files of a published release with short-lived download URLs; empty otherwise."""
    if not release.is_published:
        return []
    rows: list[ReleaseFile] = []
    for relative, sha256 in sorted(release.files.items()):
        key = f"{release.storage_prefix}/{relative}"
        url = None
        if with_urls:
            try:
                url = storage.media_url(
                    key, download_name=release_download_name(release=release, relative=relative)
                )
            except storage.StorageUnavailable:
                url = None
        rows.append(
            {
                "path": relative,
                "sha256": sha256,
                "url": url,
                "format": _format_of(relative),
            }
        )
    return rows


def _format_of(relative: str) -> str:
    extension = os.path.splitext(relative)[1].lstrip(".")
    return {
        "jsonl": "JSONL",
        "csv": "CSV",
        "parquet": "Parquet",
        "md": "card",
        "json": "manifest",
    }.get(extension, extension)


def _fetch(sql: str, parameters: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, parameters)
        return cursor.fetchall()


# What `release_compare` returns (the compare API's payload, and the release's `changes` summary).
SplitMove = TypedDict("SplitMove", {"from": str, "to": str, "candidates": int, "clips": int})


class CompareSummary(TypedDict):
    against: int
    added: int
    removed: int
    in_both: int
    score_changed: int
    mean_shift: float | None
    mean_absolute_shift: float | None
    largest_shift: float
    class_changed: int
    moved_between_splits: int
    split_moves: list[SplitMove]
    shift_histogram: dict[str, int]


class CompareExample(TypedDict):
    """A candidate only one release holds (the other's score is None)."""

    candidate_id: str
    campaign: str
    split: str
    new_overall: float | None
    old_overall: float | None


class ScoreChange(TypedDict):
    candidate_id: str
    campaign: str
    old_overall: float
    new_overall: float
    shift: float
    old_split: str
    new_split: str


class ReleaseComparison(TypedDict):
    release: int
    other: int
    summary: CompareSummary
    added: list[CompareExample]
    removed: list[CompareExample]
    largest_changes: list[ScoreChange]


def release_compare(*, release: Release, other: Release, examples: int = 20) -> ReleaseComparison:
    """What changed from `other` (older) to `release`: candidates added and removed, scores that
    moved (and by how much), training classes that changed, and clips that moved between splits.

    Candidates are matched by campaign candidate (a candidate in a campaign), in SQL over the
    releases' ReleaseRecord rows: no release file is read.
    """
    new, old = release.pk, other.pk
    # The example lists are always present (empty with examples=0), as the API schema says.
    result: ReleaseComparison = {
        "release": new,
        "other": old,
        "summary": _compare_summary(new=new, old=old),
        "added": [],
        "removed": [],
        "largest_changes": [],
    }
    if examples:
        result["added"] = _examples(
            f"""SELECT cand.external_id, camp.slug, r.split, r.overall, NULL
                FROM {T_RECORD} r {_EXAMPLE_CANDIDATE}
                WHERE r.release_id = %s AND NOT EXISTS (SELECT 1 FROM {T_RECORD} o
                  WHERE o.release_id = %s AND o.campaign_candidate_id = r.campaign_candidate_id)
                ORDER BY cand.external_id LIMIT %s""",
            [new, old, examples],
        )
        result["removed"] = _examples(
            f"""SELECT cand.external_id, camp.slug, r.split, NULL, r.overall
                FROM {T_RECORD} r {_EXAMPLE_CANDIDATE}
                WHERE r.release_id = %s AND NOT EXISTS (SELECT 1 FROM {T_RECORD} n
                  WHERE n.release_id = %s AND n.campaign_candidate_id = r.campaign_candidate_id)
                ORDER BY cand.external_id LIMIT %s""",
            [old, new, examples],
        )
        result["largest_changes"] = _largest_changes(new=new, old=old, examples=examples)
    return result


# Split moves the summary counts: every ordered pair of different splits.
_SPLIT_PAIRS = [(before, after) for before in range(3) for after in range(3) if before != after]


def _compare_summary(*, new: int, old: int) -> CompareSummary:
    """The counts of `release_compare`, in one pass: a full join of the two releases' records
    (both read in primary-key order)."""
    both = "n.campaign_candidate_id IS NOT NULL AND o.campaign_candidate_id IS NOT NULL"
    buckets = "".join(
        ", count(*) FILTER (WHERE n.overall <> o.overall"
        + (f" AND n.overall - o.overall >= {low!r}" if low is not None else "")
        + (f" AND n.overall - o.overall < {high!r}" if high is not None else "")
        + ")"
        for _, low, high in SHIFT_BUCKETS
    )
    moves = "".join(
        f", count(*) FILTER (WHERE o.split = {before} AND n.split = {after}),"
        f" count(DISTINCT n.clip_id) FILTER (WHERE o.split = {before} AND n.split = {after})"
        for before, after in _SPLIT_PAIRS
    )
    row = _fetch(
        f"""
        SELECT
          count(*) FILTER (WHERE o.campaign_candidate_id IS NULL),
          count(*) FILTER (WHERE n.campaign_candidate_id IS NULL),
          count(*) FILTER (WHERE {both}),
          count(*) FILTER (WHERE n.overall <> o.overall),
          avg(n.overall - o.overall) FILTER (WHERE n.overall <> o.overall),
          avg(abs(n.overall - o.overall)) FILTER (WHERE n.overall <> o.overall),
          max(abs(n.overall - o.overall)),
          count(*) FILTER (WHERE {both} AND n.training_class IS DISTINCT FROM o.training_class),
          count(*) FILTER (WHERE n.split <> o.split)
          {buckets} {moves}
        FROM (SELECT * FROM {T_RECORD} WHERE release_id = %s) n
          FULL JOIN (SELECT * FROM {T_RECORD} WHERE release_id = %s) o
          ON o.campaign_candidate_id = n.campaign_candidate_id
        """,
        [new, old],
    )[0]
    (
        added,
        removed,
        common,
        changed,
        mean_shift,
        mean_absolute_shift,
        largest_shift,
        class_changes,
        moved_candidates,
    ) = row[:9]
    bucket_counts = row[9 : 9 + len(SHIFT_BUCKETS)]
    move_counts = row[9 + len(SHIFT_BUCKETS) :]
    return {
        "against": old,
        "added": int(added),
        "removed": int(removed),
        "in_both": int(common),
        "score_changed": int(changed),
        "mean_shift": float(mean_shift) if mean_shift is not None else None,
        "mean_absolute_shift": float(mean_absolute_shift)
        if mean_absolute_shift is not None
        else None,
        "largest_shift": float(largest_shift) if largest_shift else 0.0,
        "class_changed": int(class_changes),
        "moved_between_splits": int(moved_candidates),
        "split_moves": [
            {
                "from": SPLIT_NAMES[before],
                "to": SPLIT_NAMES[after],
                "candidates": int(move_counts[2 * index]),
                "clips": int(move_counts[2 * index + 1]),
            }
            for index, (before, after) in enumerate(_SPLIT_PAIRS)
            if move_counts[2 * index]
        ],
        "shift_histogram": {
            label: int(count)
            for (label, _, _), count in zip(SHIFT_BUCKETS, bucket_counts, strict=True)
        },
    }


# The candidate, campaign candidate and campaign of a ReleaseRecord `r` (the example lists).
_EXAMPLE_CANDIDATE = f"""JOIN {T_CAND} cand ON cand.id = r.candidate_id
                        JOIN {T_CC} cc ON cc.id = r.campaign_candidate_id
                        JOIN {T_CAMPAIGN} camp ON camp.id = cc.campaign_id"""


def _largest_changes(*, new: int, old: int, examples: int) -> list[ScoreChange]:
    return [
        {
            "candidate_id": external_id,
            "campaign": slug,
            "old_overall": old_overall,
            "new_overall": new_overall,
            "shift": new_overall - old_overall,
            "old_split": SPLIT_NAMES[old_split],
            "new_split": SPLIT_NAMES[new_split],
        }
        for external_id, slug, old_overall, new_overall, old_split, new_split in _fetch(
            f"""SELECT cand.external_id, camp.slug, o.overall, r.overall, o.split, r.split
                    FROM {T_RECORD} r JOIN {T_RECORD} o
                      ON o.campaign_candidate_id = r.campaign_candidate_id AND o.release_id = %s
                    {_EXAMPLE_CANDIDATE}
                    WHERE r.release_id = %s AND (r.overall <> o.overall OR r.split <> o.split)
                    ORDER BY abs(r.overall - o.overall) DESC, cand.external_id LIMIT %s""",
            [old, new, examples],
        )
    ]


def _examples(sql: str, parameters: list[Any]) -> list[CompareExample]:
    return [
        {
            "candidate_id": external_id,
            "campaign": slug,
            "split": SPLIT_NAMES[split],
            "new_overall": new_overall,
            "old_overall": old_overall,
        }
        for external_id, slug, split, new_overall, old_overall in _fetch(sql, parameters)
    ]


LICENCE_ROWS_CACHE_SECONDS = 24 * 3600


def release_licence_rows(*, release: Release) -> list[dict[str, str]]:
    """The licence of each source of a published release, as its manifest records them (empty
    for releases built before the manifest listed them, or while storage is unreachable).

    A published manifest never changes (its sha256 is in ``release.files``), so what was read
    once is cached under that hash: the release page does not fetch it from storage per view."""
    sha = (release.files or {}).get("manifest.json")
    if not release.is_published or not sha:
        return []
    key = f"lepus:release-licences:{release.pk}:{sha}"
    cached = cache.get(key)
    if isinstance(cached, list):
        return cached
    try:
        manifest = json.loads(storage.read_bytes(f"{release.storage_prefix}/manifest.json"))
    except (OSError, ValueError, storage.StorageUnavailable):
        return []
    except Exception as error:  # S3 unreachable (botocore's own errors): the page still answers
        if storage.is_unavailable(error):
            return []
        raise
    rows = manifest.get("licenses")
    rows = rows if isinstance(rows, list) else []
    cache.set(key, rows, LICENCE_ROWS_CACHE_SECONDS)
    return rows
