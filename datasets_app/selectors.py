"""Reads of datasets_app: row counts of the data layer's tables, clip status counts, recent import
batches and video jobs. The platform-wide counts (with campaigns and judgments) are
`annotation.selectors.platform_stats`."""

from __future__ import annotations

from typing import TypedDict

from django.db.models import Count, QuerySet

from common.models import JobStatus
from datasets_app.models import (
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ClipModality,
    ClipStatus,
    ImportBatch,
    ReferenceCaption,
    VideoAttachJob,
)


def clip_status_counts() -> dict[str, int]:
    """{status: clips} with every status present (0 when none)."""
    counts = {status.value: 0 for status in ClipStatus}
    for row in Clip.objects.order_by().values("status").annotate(n=Count("pk")):
        counts[row["status"]] = row["n"]
    return counts


def clip_modality_counts() -> dict[str, int]:
    """{modality: clips}: video clips and still images (0 when none)."""
    counts = {modality.value: 0 for modality in ClipModality}
    for row in Clip.objects.order_by().values("modality").annotate(n=Count("pk")):
        counts[row["modality"]] = row["n"]
    return counts


class DatasetStats(TypedDict):
    clips: int
    clips_servable: int
    clips_by_status: dict[str, int]
    clips_by_modality: dict[str, int]
    references: int
    systems: int
    candidates: int
    import_batches: int
    video_jobs: dict[str, int]


def dataset_stats() -> DatasetStats:
    """Row counts of the data layer's tables (clips, references, systems, candidates, import
    batches, video jobs)."""
    return {
        "clips": Clip.objects.count(),
        "clips_servable": Clip.objects.servable().count(),
        "clips_by_status": clip_status_counts(),
        "clips_by_modality": clip_modality_counts(),
        "references": ReferenceCaption.objects.count(),
        "systems": CaptioningSystem.objects.count(),
        "candidates": CandidateCaption.objects.count(),
        "import_batches": ImportBatch.objects.count(),
        "video_jobs": video_job_status_counts(),
    }


def video_job_status_counts() -> dict[str, int]:
    counts = {status.value: 0 for status in JobStatus}
    for row in VideoAttachJob.objects.order_by().values("status").annotate(n=Count("pk")):
        counts[row["status"]] = row["n"]
    return counts


def video_jobs_recent(*, limit: int = 20) -> QuerySet[VideoAttachJob]:
    return VideoAttachJob.objects.select_related("requested_by").order_by("-created_at", "-pk")[
        :limit
    ]


def clips_with_errors(*, limit: int = 20) -> QuerySet[Clip]:
    return Clip.objects.filter(status=ClipStatus.ERROR).order_by("-processed_at", "vatex_id")[
        :limit
    ]


def import_batches_recent(*, limit: int = 50) -> QuerySet[ImportBatch]:
    return ImportBatch.objects.select_related("created_by").order_by("-created_at", "-pk")[:limit]
