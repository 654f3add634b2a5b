"""QC runs of a campaign: queue a full recompute, list runs, one run.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import Campaign, QCRun
from annotation.quality.api.base import TAG, campaign_or_404
from annotation.quality.run import qc_run_start
from common.api import ErrorSerializer


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


class QCRunListApi(APIView):
    @extend_schema(
        tags=TAG, responses={200: QCRunSerializer(many=True)}, operation_id="qc_runs_list"
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        runs = QCRun.objects.filter(campaign=campaign).select_related("campaign")[:50]
        return Response(QCRunSerializer(runs, many=True).data)

    @extend_schema(
        tags=TAG,
        request=None,
        responses={202: QCRunSerializer},
        operation_id="qc_runs_start",
        description="Queue a full QC recompute (or return the run already queued or running).",
    )
    def post(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        run = qc_run_start(campaign=campaign, requested_by=request.user)
        return Response(QCRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class QCRunDetailApi(APIView):
    @extend_schema(
        tags=TAG,
        responses={200: QCRunSerializer, 404: ErrorSerializer},
        operation_id="qc_runs_detail",
    )
    def get(self, request: Request, slug: str, run_id: int) -> Response:
        campaign = campaign_or_404(slug)
        run = get_object_or_404(
            QCRun.objects.select_related("campaign"), pk=run_id, campaign=campaign
        )
        return Response(QCRunSerializer(run).data)
