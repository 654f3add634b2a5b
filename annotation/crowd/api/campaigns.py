"""Curator API for campaigns: list, create, read, update, delete; invite links; payments."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.crowd.api.option_fields import option_serializer_field
from annotation.crowd.campaign_options import CAMPAIGN_FIELDS, INTEGER_MAX, OPTIONS_BY_NAME
from annotation.crowd.services.campaigns import (
    CampaignInvalid,
    campaign_create,
    campaign_delete,
    campaign_update,
    campaigns_with_counts,
)
from annotation.crowd.services.payments import payments_rows, payments_total
from annotation.crowd.services.workers import invite_create, invite_url_path
from annotation.figures import campaigns_with_figures
from annotation.figures_serializer import CampaignFiguresSerializer
from annotation.models import Campaign
from common.api import ErrorSerializer, FieldErrorsSerializer, validated
from common.routes import route


class CampaignSerializer(serializers.ModelSerializer):
    """A campaign with its settings and its figures (`annotation.figures`; the campaign object
    carries them as `figures`, see `_with_figures`)."""

    clips = serializers.IntegerField(source="clip_count", read_only=True)
    figures = CampaignFiguresSerializer(read_only=True)
    participations = serializers.IntegerField(source="participation_count", read_only=True)
    worker_url = serializers.SerializerMethodField()
    # Blank when the campaign has none (the model field's blank=True); not always a URI.
    redirect_url = serializers.CharField(read_only=True)
    screen_out_redirect_url = serializers.CharField(read_only=True)

    class Meta:
        model = Campaign
        fields = [
            *CAMPAIGN_FIELDS,
            "is_imported",
            "selection",
            "created_at",
            "updated_at",
            "clips",
            "participations",
            "worker_url",
            "figures",
        ]
        read_only_fields = fields

    def get_worker_url(self, campaign: Campaign) -> str:
        return f"/w/{campaign.slug}/"


# Bigint ids of the candidate selection (a larger value used to pass validation and fail in
# PostgreSQL with a 500).
BIG_INTEGER_MAX = 2**63 - 1


# The rubrics a curator may choose (the campaign's read-only field also shows `imported`); named
# for the schema's RubricInputEnum (settings.SPECTACULAR_SETTINGS).
RUBRIC_INPUT_CHOICES = list(OPTIONS_BY_NAME["rubric"].choices)


# Each setting's field is derived from its rule (`annotation.crowd.campaign_options`); only the order
# is written here (the schema's).
class CampaignOptionsSerializer(serializers.Serializer):
    name = option_serializer_field("name")
    description = option_serializer_field("description")
    instructions = option_serializer_field("instructions")
    status = option_serializer_field("status")
    questions = option_serializer_field("questions")
    rubric = option_serializer_field("rubric")
    overall_question_key = option_serializer_field("overall_question_key")
    judgments_per_candidate = option_serializer_field("judgments_per_candidate")
    allocation = option_serializer_field("allocation")
    reference_free = option_serializer_field("reference_free")
    lease_seconds = option_serializer_field("lease_seconds")
    min_seconds_on_clip = option_serializer_field("min_seconds_on_clip")
    reason_required_at_or_below = option_serializer_field("reason_required_at_or_below")
    max_assignments_per_worker = option_serializer_field("max_assignments_per_worker")
    retest_share = option_serializer_field("retest_share")
    retest_min_gap = option_serializer_field("retest_min_gap")
    control_rate = option_serializer_field("control_rate")
    control_settings = option_serializer_field("control_settings")
    qc_rules = option_serializer_field("qc_rules")
    review_range_threshold = option_serializer_field("review_range_threshold")
    metric = option_serializer_field("metric")
    pay_per_assignment = option_serializer_field("pay_per_assignment")
    currency = option_serializer_field("currency")
    completion_code = option_serializer_field("completion_code")
    redirect_url = option_serializer_field("redirect_url")
    screen_out_code = option_serializer_field("screen_out_code")
    screen_out_redirect_url = option_serializer_field("screen_out_redirect_url")
    prolific_study_id = option_serializer_field("prolific_study_id")
    mturk_hit_id = option_serializer_field("mturk_hit_id")
    erasure_mode = option_serializer_field("erasure_mode")


class CampaignCreateSerializer(CampaignOptionsSerializer):
    slug = option_serializer_field("slug", required=True)
    name = option_serializer_field("name", required=True)
    import_batch_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=BIG_INTEGER_MAX), required=False
    )
    systems = serializers.ListField(child=serializers.CharField(), required=False)
    clips = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="VATEX clip ids."
    )
    clip_limit = serializers.IntegerField(min_value=1, max_value=INTEGER_MAX, required=False)


class InviteInputSerializer(serializers.Serializer):
    invitee = serializers.CharField(max_length=200)
    valid_days = serializers.IntegerField(min_value=1, max_value=365, default=14)


class InviteOutputSerializer(serializers.Serializer):
    invitee = serializers.CharField()
    invite_token = serializers.CharField()
    invite_url = serializers.CharField()
    expires_at = serializers.DateTimeField()


class PaymentRowSerializer(serializers.Serializer):
    platform = serializers.CharField()
    external_id = serializers.CharField()
    status = serializers.CharField()
    assignments_submitted = serializers.IntegerField()
    active_ms = serializers.IntegerField()
    server_ms = serializers.IntegerField()
    amount = serializers.DecimalField(max_digits=12, decimal_places=2)
    currency = serializers.CharField()


class PaymentsSerializer(serializers.Serializer):
    total = serializers.DictField()
    workers = PaymentRowSerializer(many=True)


def _campaign_response(campaign: Campaign, *, status_code: int = 200) -> Response:
    annotated = campaigns_with_figures([campaigns_with_counts().get(pk=campaign.pk)])[0]
    return Response(CampaignSerializer(annotated).data, status=status_code)


def _option_values(data: Mapping[str, Any]) -> dict[str, Any]:
    values = dict(data)
    if "questions" in values:
        values["questions"] = [dict(question) for question in values["questions"]]
    return values


@route("campaigns/", name="campaign-list")
class CampaignListApi(APIView):
    @extend_schema(
        operation_id="campaign_list",
        tags=["campaigns"],
        responses={200: CampaignSerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        campaigns = campaigns_with_figures(list(campaigns_with_counts().order_by("-created_at")))
        return Response(CampaignSerializer(campaigns, many=True).data)

    @extend_schema(
        operation_id="campaign_create",
        tags=["campaigns"],
        request=CampaignCreateSerializer,
        responses={201: CampaignSerializer, 400: FieldErrorsSerializer},
    )
    def post(self, request: Request) -> Response:
        data = _option_values(validated(CampaignCreateSerializer, request))
        try:
            campaign = campaign_create(
                slug=data.pop("slug"),
                name=data.pop("name"),
                questions=data.pop("questions", None),
                judgments_per_candidate=data.pop("judgments_per_candidate", 3),
                reference_free=data.pop("reference_free", False),
                import_batch_ids=data.pop("import_batch_ids", None),
                system_names=data.pop("systems", None),
                clip_vatex_ids=data.pop("clips", None),
                clip_limit=data.pop("clip_limit", None),
                created_by=request.user,
                **data,
            )
        except CampaignInvalid as invalid:
            return Response(invalid.errors, status=status.HTTP_400_BAD_REQUEST)
        return _campaign_response(campaign, status_code=status.HTTP_201_CREATED)


@route("campaigns/<slug:slug>/", name="campaign-detail")
class CampaignDetailApi(APIView):
    @extend_schema(operation_id="campaign_read", tags=["campaigns"], responses=CampaignSerializer)
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaigns_with_figures([get_object_or_404(campaigns_with_counts(), slug=slug)])[
            0
        ]
        return Response(CampaignSerializer(campaign).data)

    @extend_schema(
        operation_id="campaign_update",
        tags=["campaigns"],
        request=CampaignOptionsSerializer,
        responses={200: CampaignSerializer, 400: FieldErrorsSerializer},
    )
    def patch(self, request: Request, slug: str) -> Response:
        campaign = get_object_or_404(Campaign, slug=slug)
        options = validated(CampaignOptionsSerializer, request, partial=True)
        try:
            campaign = campaign_update(campaign=campaign, **_option_values(options))
        except CampaignInvalid as invalid:
            return Response(invalid.errors, status=status.HTTP_400_BAD_REQUEST)
        return _campaign_response(campaign)

    @extend_schema(
        operation_id="campaign_delete",
        tags=["campaigns"],
        responses={
            204: OpenApiResponse(description="Deleted."),
            409: OpenApiResponse(FieldErrorsSerializer, description="Workers joined already."),
        },
    )
    def delete(self, request: Request, slug: str) -> Response:
        campaign = get_object_or_404(Campaign, slug=slug)
        try:
            campaign_delete(campaign=campaign)
        except CampaignInvalid as invalid:
            return Response(invalid.errors, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)


@route("campaigns/<slug:slug>/invites", name="campaign-invite-create")
class CampaignInviteApi(APIView):
    @extend_schema(
        operation_id="campaign_invite_create",
        summary="An HMAC-signed invite link for one invitee",
        tags=["campaigns"],
        request=InviteInputSerializer,
        responses={201: InviteOutputSerializer, 404: ErrorSerializer},
    )
    def post(self, request: Request, slug: str) -> Response:
        campaign = get_object_or_404(Campaign, slug=slug, is_imported=False)
        data = validated(InviteInputSerializer, request)
        invitee = data["invitee"].strip()
        token, expires_at = invite_create(
            campaign=campaign,
            invitee=invitee,
            valid_for=timedelta(days=data["valid_days"]),
        )
        body = {
            "invitee": invitee,
            "invite_token": token,
            "invite_url": request.build_absolute_uri(
                invite_url_path(campaign=campaign, token=token)
            ),
            "expires_at": expires_at,
        }
        return Response(InviteOutputSerializer(body).data, status=status.HTTP_201_CREATED)


@route("campaigns/<slug:slug>/payments", name="campaign-payments")
class CampaignPaymentsApi(APIView):
    @extend_schema(
        operation_id="campaign_payments",
        summary="What each worker is owed (see also the CSV downloads in the dashboard)",
        tags=["campaigns"],
        responses={200: PaymentsSerializer},
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = get_object_or_404(Campaign, slug=slug)
        rows = [
            {
                "platform": row.platform,
                "external_id": row.external_id,
                "status": row.status,
                "assignments_submitted": row.assignments_submitted,
                "active_ms": row.active_ms,
                "server_ms": row.server_ms,
                "amount": row.amount,
                "currency": row.currency,
            }
            for row in payments_rows(campaign=campaign)
        ]
        return Response(
            PaymentsSerializer({"total": payments_total(campaign=campaign), "workers": rows}).data
        )
