"""Erasing a participant over the API (docs/privacy.md): the worker's own request with their
worker token (`POST /api/v1/worker/erase`), and a curator's, beside the quality API's worker routes
(`POST /api/v1/campaigns/<slug>/quality/workers/<id>/erase`)."""

from __future__ import annotations

from typing import cast

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.crowd.api.worker import WORKER_ERRORS, MeThrottle
from annotation.crowd.auth import IsWorker, WorkerTokenAuthentication
from annotation.models import ErasureMode, Participation
from annotation.privacy.services import ErasureRefused, participation_erase, participation_erase_own
from annotation.quality.api.base import TAG, campaign_or_404, participation_or_404
from common.api import ErrorSerializer, FieldErrorsSerializer, validated


class EraseInputSerializer(serializers.Serializer):
    confirm = serializers.BooleanField(
        help_text="Must be true: erasing cannot be undone (a guard against stray requests)."
    )

    def validate_confirm(self, value: bool) -> bool:
        if not value:
            raise serializers.ValidationError("Set confirm to true to erase.")
        return value


class ErasureSerializer(serializers.Serializer):
    erased = serializers.BooleanField()
    dry_run = serializers.BooleanField()
    participations = serializers.IntegerField(help_text="Participations erased (all campaigns).")
    campaigns = serializers.DictField(
        child=serializers.ChoiceField(choices=ErasureMode.choices),
        help_text="The erasure mode applied, per campaign slug.",
    )
    judgments_deleted = serializers.IntegerField()
    judgments_pseudonymised = serializers.IntegerField()
    reasons_erased = serializers.IntegerField()


class WorkerEraseApi(APIView):
    """The worker erases their participation in the token's campaign, and nothing else
    (docs/privacy.md); an excluded worker's token still works."""

    authentication_classes = [WorkerTokenAuthentication]
    accepts_revoked_worker_tokens = True
    permission_classes = [IsWorker]
    throttle_classes = [MeThrottle]

    @extend_schema(
        operation_id="worker_erase",
        summary="Erase the token's participation: platform ids, free text and (by the "
        "campaign's erasure mode) judgments in this campaign",
        tags=["worker"],
        request=EraseInputSerializer,
        responses={
            200: ErasureSerializer,
            400: OpenApiResponse(FieldErrorsSerializer, description="confirm is not true."),
            **WORKER_ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        validated(EraseInputSerializer, request)
        participation = cast(Participation, request.auth)
        outcome = participation_erase_own(
            participation=Participation.objects.select_related("worker").get(pk=participation.pk)
        )
        return Response(ErasureSerializer(outcome.as_dict()).data)


class CuratorEraseApi(APIView):
    """A curator erases the person behind a participation (every campaign; docs/privacy.md)."""

    @extend_schema(
        tags=TAG,
        request=EraseInputSerializer,
        responses={
            200: ErasureSerializer,
            400: FieldErrorsSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
        },
        operation_id="quality_worker_erase",
    )
    def post(self, request: Request, slug: str, participation_id: int) -> Response:
        campaign = campaign_or_404(slug)
        participation = participation_or_404(campaign, participation_id)
        validated(EraseInputSerializer, request)
        try:
            outcome = participation_erase(
                participation=participation, actor=request.user, requested_by="curator"
            )
        except ErasureRefused as refused:
            return Response({"detail": str(refused)}, status=status.HTTP_409_CONFLICT)
        return Response(ErasureSerializer(outcome.as_dict()).data)
