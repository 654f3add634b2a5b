"""Control items of a campaign: generate them from the data.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import CampaignCandidate
from annotation.quality.api.base import TAG, campaign_or_404
from annotation.quality.controls import CONTROL_KINDS, controls_generate
from common.api import FieldErrorsSerializer, validated
from common.routes import route


class ControlsInputSerializer(serializers.Serializer):
    rate = serializers.FloatField(min_value=0, max_value=1, help_text="Share of clips with one.")
    seed = serializers.IntegerField(required=False, default=0)
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=list(CONTROL_KINDS)),
        required=False,
        default=list(CONTROL_KINDS),
        allow_empty=False,
    )


class ControlsOutputSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    controls = serializers.IntegerField(help_text="Control items in the campaign now.")


@route("campaigns/<slug:slug>/controls", name="controls")
class ControlsApi(APIView):
    @extend_schema(
        tags=TAG,
        request=ControlsInputSerializer,
        responses={201: ControlsOutputSerializer, 400: FieldErrorsSerializer},
        operation_id="controls_generate",
    )
    def post(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        data = validated(ControlsInputSerializer, request)
        created = controls_generate(
            campaign=campaign, rate=data["rate"], seed=data["seed"], kinds=data["kinds"]
        )
        total = CampaignCandidate.objects.filter(campaign=campaign, is_control=True).count()
        return Response(
            ControlsOutputSerializer({"created": created, "controls": total}).data,
            status=status.HTTP_201_CREATED,
        )
