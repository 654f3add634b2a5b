"""QC runs of a campaign: queue a full recompute, list runs, one run.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from rest_framework import serializers

from annotation.models import Campaign, QCRun
from annotation.quality.api.base import campaign_run_apis
from annotation.quality.run import qc_run_start


class QCRunSerializer(serializers.ModelSerializer):
    campaign: serializers.SlugRelatedField[Campaign] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    status = serializers.CharField(
        read_only=True, help_text="queued, running, succeeded, failed or cancelled."
    )

    class Meta:
        model = QCRun
        fields = [
            "id",
            "campaign",
            "status",
            "progress",
            "progress_message",
            "error",
            "summary",
            "created_at",
            "started_at",
            "finished_at",
        ]


QCRunListApi, QCRunDetailApi = campaign_run_apis(
    model=QCRun,
    serializer=QCRunSerializer,
    start=qc_run_start,
    operation="qc_runs",
    start_description="Queue a full QC recompute (or return the run already queued or running).",
)
