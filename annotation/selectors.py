"""Reads over the whole platform: the row counts of the data layer and of the crowd (campaigns,
workers, assignments, judgments), as the `stats` command and the Data page show them."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet

from annotation.models import (
    Assignment,
    Campaign,
    CampaignCandidate,
    CampaignClip,
    ImportUpload,
    Judgment,
    JudgmentSource,
    Participation,
    Worker,
)
from datasets_app.selectors import dataset_stats


def platform_stats() -> dict[str, Any]:
    """Row counts of the core tables (the `stats --json` command prints exactly this)."""
    data = dataset_stats()
    judgments_by_source = {source.value: 0 for source in JudgmentSource}
    judgments_excluded = 0
    # One pass over the judgments for all three figures (`is_excluded` has no index: it counts
    # within the same scan).
    for row in (
        Judgment.objects.order_by()
        .values("source")
        .annotate(n=Count("pk"), excluded=Count("pk", filter=Q(is_excluded=True)))
    ):
        judgments_by_source[row["source"]] = row["n"]
        judgments_excluded += row["excluded"]
    # The order of the human-readable `stats` output: data, crowd, then the video jobs.
    return {
        "clips": data["clips"],
        "clips_servable": data["clips_servable"],
        "clips_by_status": data["clips_by_status"],
        "clips_by_modality": data["clips_by_modality"],
        "references": data["references"],
        "systems": data["systems"],
        "candidates": data["candidates"],
        "import_batches": data["import_batches"],
        "campaigns": Campaign.objects.count(),
        "campaign_candidates": CampaignCandidate.objects.count(),
        "campaign_clips": CampaignClip.objects.count(),
        "workers": Worker.objects.count(),
        "participations": Participation.objects.count(),
        "assignments": Assignment.objects.count(),
        "judgments": sum(judgments_by_source.values()),
        "judgments_by_source": judgments_by_source,
        "judgments_excluded": judgments_excluded,
        "video_jobs": data["video_jobs"],
    }


def campaign_modalities(*, campaign: Campaign) -> dict[str, bool]:
    """Which kinds of visual input the campaign shows (for the worker page's instructions):
    {"video": ..., "image": ...}."""
    found = set(
        CampaignClip.objects.filter(campaign=campaign)
        .values_list("clip__modality", flat=True)
        .distinct()
    )
    return {"video": "video" in found or not found, "image": "image" in found}


def import_uploads_recent(*, limit: int = 50) -> QuerySet[ImportUpload]:
    """The latest uploads of the import page, newest first."""
    return ImportUpload.objects.select_related("requested_by").order_by("-created_at", "-id")[
        :limit
    ]
