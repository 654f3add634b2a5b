"""Curator API for campaigns: list, create, read, update, delete; invite links; payments."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.crowd.services.campaigns import (
    CAMPAIGN_FIELDS,
    CHOSEN_RUBRICS,
    RETEST_GAP_MAX,
    RETEST_SHARE_MAX,
    SLUG_HELP,
    SLUG_PATTERN,
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
from annotation.models import Campaign, CampaignStatus, ErasureMode
from annotation.questions import Rubric
from common.api import ErrorSerializer, FieldErrorsSerializer


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


# The model's column bounds (PositiveSmallIntegerField, PositiveIntegerField, bigint ids): a larger
# value used to pass validation and fail in PostgreSQL with a 500.
SMALL_INTEGER_MAX = 32767
INTEGER_MAX = 2**31 - 1
BIG_INTEGER_MAX = 2**63 - 1


# The rubrics a curator may choose (the campaign's read-only field also shows `imported`).
RUBRIC_INPUT_CHOICES = [(value, Rubric(value).label) for value in CHOSEN_RUBRICS]


class QuestionInputSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField(required=False)  # type: ignore[assignment]
    help = serializers.CharField(required=False, allow_blank=True)
    levels = serializers.ListField(child=serializers.DictField(), required=False)


class CampaignOptionsSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    instructions = serializers.CharField(required=False, allow_blank=True)
    status = serializers.ChoiceField(choices=CampaignStatus.choices, required=False)
    questions = QuestionInputSerializer(many=True, required=False)
    rubric = serializers.ChoiceField(
        choices=RUBRIC_INPUT_CHOICES,
        required=False,
        help_text="Whose words describe each question's levels: per_criterion (the default; "
        "Lepus's own wording for each question), paper (the Rigel paper's Appendix C holistic "
        "rubric, the same for every question) or custom (each question gives its levels). "
        "Frozen once workers have submitted judgments.",
    )
    overall_question_key = serializers.CharField(required=False, allow_blank=True)
    judgments_per_candidate = serializers.IntegerField(min_value=1, max_value=100, required=False)
    reference_free = serializers.BooleanField(required=False)
    lease_seconds = serializers.IntegerField(min_value=30, max_value=INTEGER_MAX, required=False)
    min_seconds_on_clip = serializers.IntegerField(
        min_value=0, max_value=INTEGER_MAX, required=False
    )
    reason_required_at_or_below = serializers.IntegerField(
        min_value=0, max_value=SMALL_INTEGER_MAX, required=False, allow_null=True
    )
    max_assignments_per_worker = serializers.IntegerField(
        min_value=1, max_value=INTEGER_MAX, required=False, allow_null=True
    )
    retest_share = serializers.FloatField(
        min_value=0,
        max_value=RETEST_SHARE_MAX,
        required=False,
        help_text="Test-retest: share of each worker's submitted clips served to them again "
        "later in their session, unannounced (0 = off). Repeats take no quota slot, are not "
        "paid and never count as judgments.",
    )
    retest_min_gap = serializers.IntegerField(
        min_value=1,
        max_value=RETEST_GAP_MAX,
        required=False,
        help_text="Test-retest: at least this many other clips between a clip and its repeat.",
    )
    control_rate = serializers.FloatField(min_value=0, max_value=1, required=False)
    control_settings = serializers.JSONField(required=False)
    qc_rules = serializers.JSONField(required=False)
    review_range_threshold = serializers.IntegerField(
        min_value=1, max_value=SMALL_INTEGER_MAX, required=False
    )
    pay_per_assignment = serializers.DecimalField(
        max_digits=8, decimal_places=2, min_value=Decimal("0"), required=False
    )
    currency = serializers.CharField(min_length=3, max_length=3, required=False)
    completion_code = serializers.CharField(max_length=100, required=False, allow_blank=True)
    redirect_url = serializers.URLField(max_length=500, required=False, allow_blank=True)
    screen_out_code = serializers.CharField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="Shown to a worker excluded by quality control (e.g. Prolific's 'screened "
        "out' completion code).",
    )
    screen_out_redirect_url = serializers.URLField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="Where a worker excluded by quality control is sent (https; e.g. Prolific's "
        "completion URL with the screened-out code). MTurk workers are told to return the HIT.",
    )
    prolific_study_id = serializers.CharField(
        max_length=24,
        required=False,
        allow_blank=True,
        help_text="Bind the campaign to this Prolific study: joins carrying another STUDY_ID, or "
        "from MTurk, are refused. Blank: no binding.",
    )
    mturk_hit_id = serializers.CharField(
        max_length=64,
        required=False,
        allow_blank=True,
        help_text="Bind the campaign to this MTurk HIT: joins carrying another hitId, or from "
        "Prolific, are refused. Blank: no binding.",
    )
    erasure_mode = serializers.ChoiceField(
        choices=ErasureMode.choices,
        required=False,
        help_text="What erasing a participant does to their judgments: delete them, or keep them "
        "under a random pseudonym. Platform ids and free text are deleted either way; the "
        "consent text tells workers which applies.",
    )


class CampaignCreateSerializer(CampaignOptionsSerializer):
    slug = serializers.RegexField(
        SLUG_PATTERN,
        max_length=100,
        error_messages={"invalid": SLUG_HELP},
        help_text=SLUG_HELP,
    )
    name = serializers.CharField(max_length=200)
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


def _option_values(data: dict[str, Any]) -> dict[str, Any]:
    values = dict(data)
    if "questions" in values:
        values["questions"] = [dict(question) for question in values["questions"]]
    return values


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
        serializer = CampaignCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = _option_values(serializer.validated_data)
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
        serializer = CampaignOptionsSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        try:
            campaign = campaign_update(
                campaign=campaign, **_option_values(serializer.validated_data)
            )
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
        serializer = InviteInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        invitee = serializer.validated_data["invitee"].strip()
        token, expires_at = invite_create(
            campaign=campaign,
            invitee=invitee,
            valid_for=timedelta(days=serializer.validated_data["valid_days"]),
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
