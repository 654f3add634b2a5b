"""QC runs of a campaign: queue a full recompute, list runs, one run.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from annotation.models import QCRun
from annotation.quality.api.base import RUN_FIELDS, CampaignRunSerializer, campaign_run_apis
from annotation.quality.run import qc_run_start
from common.routes import route


class QCRunSerializer(CampaignRunSerializer):
    class Meta:
        model = QCRun
        fields = ["id", "campaign", *RUN_FIELDS]


QCRunListApi, QCRunDetailApi = campaign_run_apis(
    model=QCRun,
    serializer=QCRunSerializer,
    start=qc_run_start,
    operation="qc_runs",
    start_description="Queue a full QC recompute (or return the run already queued or running).",
)
route("campaigns/<slug:slug>/quality/runs", name="qc-runs")(QCRunListApi)
route("campaigns/<slug:slug>/quality/runs/<int:run_id>", name="qc-run-detail")(QCRunDetailApi)
