"""Curator API of rater-severity calibration (under /api/v1/campaigns/<slug>/calibration...):
the latest model fit with every worker's severity and its uncertainty, and calibration runs
(list, queue, detail). Curators only (the DRF default `IsCurator`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import CalibrationRun
from annotation.quality.api.base import (
    RUN_FIELDS,
    TAG,
    CampaignRunSerializer,
    campaign_or_404,
    campaign_run_apis,
)
from annotation.quality.calibration_job import (
    calibration_latest,
    calibration_run_start,
    worker_severities,
)
from common.api import ErrorSerializer
from common.routes import route


class CalibrationRunSerializer(CampaignRunSerializer):
    summary = serializers.DictField(
        read_only=True,
        help_text='The model, its settings and per question its fit statistics ("questions").',
    )

    class Meta:
        model = CalibrationRun
        fields = ["id", "campaign", "qc_run", *RUN_FIELDS]


class SeveritySerializer(serializers.Serializer):
    participation = serializers.IntegerField()
    worker = serializers.CharField(help_text="External id on the crowd platform.")
    question = serializers.CharField()
    severity = serializers.FloatField(
        help_text="Logits; > 0 is harsher than the campaign's average rater."
    )
    standard_error = serializers.FloatField()
    low = serializers.FloatField(help_text="severity - 1.96 standard errors.")
    high = serializers.FloatField(help_text="severity + 1.96 standard errors.")
    judgments = serializers.IntegerField()
    infit = serializers.FloatField(allow_null=True, help_text="Rasch infit mean square (~1).")
    outfit = serializers.FloatField(allow_null=True, help_text="Rasch outfit mean square (~1).")


class CalibrationSerializer(serializers.Serializer):
    campaign = serializers.CharField()
    run = CalibrationRunSerializer(allow_null=True, help_text="The latest successful run.")
    severities = SeveritySerializer(many=True)


@route("campaigns/<slug:slug>/calibration", name="calibration")
class CalibrationApi(APIView):
    @extend_schema(
        tags=TAG,
        responses={200: CalibrationSerializer, 404: ErrorSerializer},
        operation_id="calibration_detail",
        description="The latest successful calibration of the campaign: the model and its fit "
        "statistics, and every worker's severity per question with its 95% interval.",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        names = dict(campaign.participations.values_list("id", "worker__external_id"))
        rows = [
            {
                "participation": participation,
                "worker": names.get(participation, ""),
                "question": key,
                **entry,
            }
            for participation, entries in worker_severities(campaign=campaign).items()
            for key, entry in entries.items()
        ]
        payload = {
            "campaign": campaign.slug,
            "run": calibration_latest(campaign=campaign),
            "severities": rows,
        }
        return Response(CalibrationSerializer(payload).data)


CalibrationRunListApi, CalibrationRunDetailApi = campaign_run_apis(
    model=CalibrationRun,
    serializer=CalibrationRunSerializer,
    start=calibration_run_start,
    operation="calibration_runs",
    start_description="Queue a calibration (or return the run already queued or running).",
)
route("campaigns/<slug:slug>/calibration/runs", name="calibration-runs")(CalibrationRunListApi)
route("campaigns/<slug:slug>/calibration/runs/<int:run_id>", name="calibration-run-detail")(
    CalibrationRunDetailApi
)
