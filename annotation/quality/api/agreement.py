"""Krippendorff's alpha of a campaign per question, with the stored history.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.quality.agreement import campaign_agreement
from annotation.quality.api.base import TAG, campaign_or_404
from annotation.quality.selectors import agreement_history
from common.routes import route


class AlphaSerializer(serializers.Serializer):
    alpha_all = serializers.FloatField(allow_null=True, help_text="Every judgment (before QC).")
    alpha_kept = serializers.FloatField(allow_null=True, help_text="Kept judgments (after QC).")
    items = serializers.IntegerField(help_text="Candidates with at least two kept ratings.")
    judgments = serializers.IntegerField()


class AlphaPointSerializer(serializers.Serializer):
    computed_at = serializers.DateTimeField()
    alpha_all = serializers.FloatField(allow_null=True)
    alpha_kept = serializers.FloatField(allow_null=True)
    items = serializers.IntegerField()
    judgments = serializers.IntegerField()


class AgreementSerializer(serializers.Serializer):
    questions = serializers.DictField(child=AlphaSerializer())
    history = serializers.DictField(child=AlphaPointSerializer(many=True))


@route("campaigns/<slug:slug>/agreement", name="agreement")
class AgreementApi(APIView):
    @extend_schema(
        tags=TAG,
        responses={200: AgreementSerializer},
        operation_id="quality_agreement",
        description="Krippendorff's alpha (ordinal, 1-5) per question, computed now from item × "
        "value counts, with the stored history.",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        figures = campaign_agreement(campaign=campaign)
        return Response(
            AgreementSerializer(
                {"questions": figures, "history": agreement_history(campaign=campaign)}
            ).data
        )
