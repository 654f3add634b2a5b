"""The expert review queue and its items: list, claim (next), release, detail, resolve.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import AuditEntry, Campaign, ReviewItem, ReviewStatus
from annotation.quality.api.audit import AuditEntrySerializer
from annotation.quality.api.base import (
    PAGE_PARAMETERS,
    TAG,
    campaign_or_404,
    page_window,
)
from annotation.quality.review import (
    JudgmentExclusionRequest,
    ReviewError,
    review_claim,
    review_claim_next,
    review_release,
    review_resolve,
)
from annotation.quality.selectors import (
    ReviewJudgment,
    review_counts,
    review_item_detail,
    review_queue,
)
from common.api import ErrorSerializer, FieldErrorsSerializer, validated
from common.routes import route


class ReviewItemSerializer(serializers.ModelSerializer):
    candidate = serializers.IntegerField(source="campaign_candidate_id")
    text = serializers.CharField(source="campaign_candidate.candidate.text")
    clip = serializers.CharField(source="campaign_candidate.clip.vatex_id")
    system = serializers.SerializerMethodField()
    means = serializers.JSONField(source="campaign_candidate.means")
    claimed_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    resolved_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    status = serializers.CharField(read_only=True, help_text="open, claimed or resolved.")

    class Meta:
        model = ReviewItem
        fields = [
            "id",
            "candidate",
            "text",
            "clip",
            "system",
            "means",
            "status",
            "rating_range",
            "priority",
            "claimed_by",
            "claimed_at",
            "resolved_by",
            "resolved_at",
        ]

    def get_system(self, item: ReviewItem) -> str | None:
        system = item.campaign_candidate.candidate.system
        return str(system) if system else None


class ReviewQueueSerializer(serializers.Serializer):
    open = serializers.IntegerField()
    claimed = serializers.IntegerField()
    resolved = serializers.IntegerField()
    items = ReviewItemSerializer(many=True)


@route("campaigns/<slug:slug>/review", name="review-queue")
class ReviewQueueApi(APIView):
    @extend_schema(
        tags=TAG,
        parameters=[
            OpenApiParameter("status", str, enum=["waiting", *ReviewStatus.values]),
            *PAGE_PARAMETERS,
        ],
        responses={200: ReviewQueueSerializer},
        operation_id="review_queue",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        wanted = request.query_params.get("status", "waiting")
        statuses = (
            (wanted,)
            if wanted in ReviewStatus.values
            else (ReviewStatus.OPEN, ReviewStatus.CLAIMED)
        )
        items = review_queue(campaign=campaign, statuses=statuses)[page_window(request)]
        counts = review_counts(campaign=campaign)
        return Response(ReviewQueueSerializer({**counts, "items": items}).data)


@route("campaigns/<slug:slug>/review/claim-next", name="review-claim-next")
class ReviewClaimNextApi(APIView):
    @extend_schema(
        tags=TAG,
        request=None,
        responses={200: ReviewItemSerializer, 204: OpenApiResponse(description="Queue empty.")},
        operation_id="review_claim_next",
    )
    def post(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        item = review_claim_next(campaign=campaign, user=request.user)
        if item is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(ReviewItemSerializer(_load_item(campaign, item.pk)).data)


def _load_item(campaign: Campaign, item_id: int) -> ReviewItem:
    return get_object_or_404(
        ReviewItem.objects.select_related(
            "campaign",
            "campaign_candidate__candidate__system",
            "campaign_candidate__clip",
            "claimed_by",
            "resolved_by",
        ),
        pk=item_id,
        campaign=campaign,
    )


class ReviewJudgmentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    worker = serializers.CharField()
    participation = serializers.IntegerField()
    worker_status = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.source
    values = serializers.DictField(child=serializers.FloatField())
    reason = serializers.CharField(allow_blank=True)
    server_seconds = serializers.FloatField(allow_null=True)
    is_excluded = serializers.BooleanField()
    excluded_by = serializers.CharField(allow_blank=True)
    exclusion_reason = serializers.CharField(allow_blank=True)
    worker_stats = serializers.DictField(allow_null=True)


class ReviewDetailSerializer(serializers.Serializer):
    item = ReviewItemSerializer()
    references = serializers.ListField(child=serializers.CharField())
    aggregate = serializers.DictField()
    judgments = ReviewJudgmentSerializer(many=True)
    audit = AuditEntrySerializer(many=True)


class ReviewAggregate(TypedDict):
    means: dict[str, float]
    overall: float | None
    normalized: float | None
    training_class: int | None
    kept_judgments: int
    judgments_total: int
    is_finalised: bool
    dropped: bool
    resolution: dict[str, Any]


class ReviewDetailPayload(TypedDict):
    item: ReviewItem
    references: list[str]
    aggregate: ReviewAggregate
    judgments: list[ReviewJudgment]
    audit: list[AuditEntry]


def _detail_payload(item: ReviewItem) -> ReviewDetailPayload:
    detail = review_item_detail(item=item)
    candidate = detail["candidate_item"]
    return {
        "item": item,
        "references": detail["references"],
        "aggregate": {
            "means": candidate.means,
            "overall": candidate.overall,
            "normalized": candidate.normalized,
            "training_class": candidate.training_class,
            "kept_judgments": candidate.kept_judgments,
            "judgments_total": candidate.judgments_total,
            "is_finalised": candidate.is_finalised,
            "dropped": candidate.dropped,
            "resolution": candidate.resolution,
        },
        "judgments": detail["judgments"],
        "audit": detail["audit"],
    }


@route("campaigns/<slug:slug>/review/<int:item_id>", name="review-detail")
class ReviewDetailApi(APIView):
    @extend_schema(
        tags=TAG,
        responses={200: ReviewDetailSerializer, 404: ErrorSerializer},
        operation_id="review_detail",
    )
    def get(self, request: Request, slug: str, item_id: int) -> Response:
        campaign = campaign_or_404(slug)
        item = _load_item(campaign, item_id)
        return Response(ReviewDetailSerializer(_detail_payload(item)).data)


def _hold_change_api(*, action: str, change: Callable[..., bool], refused: str) -> type[APIView]:
    """The view that claims or releases an item (`change(item=, user=)`): the item as it is now,
    or 409 with `refused`. `Review<Action>Api`, operation `review_<action>`, mounted at
    `.../review/<item_id>/<action>` as `review-<action>`."""

    responses = {200: ReviewItemSerializer, 409: ErrorSerializer}

    class HoldChangeApi(APIView):
        @extend_schema(tags=TAG, request=None, responses=responses, operation_id=f"review_{action}")
        def post(self, request: Request, slug: str, item_id: int) -> Response:
            campaign = campaign_or_404(slug)
            if not change(item=_load_item(campaign, item_id), user=request.user):
                return Response({"detail": refused}, status=status.HTTP_409_CONFLICT)
            return Response(ReviewItemSerializer(_load_item(campaign, item_id)).data)

    HoldChangeApi.__name__ = HoldChangeApi.__qualname__ = f"Review{action.title()}Api"
    pattern = f"campaigns/<slug:slug>/review/<int:item_id>/{action}"
    return route(pattern, name=f"review-{action}")(HoldChangeApi)


ReviewClaimApi = _hold_change_api(
    action="claim",
    change=review_claim,
    refused="Someone else is reviewing this item, or it is resolved.",
)
ReviewReleaseApi = _hold_change_api(
    action="release", change=review_release, refused="You do not hold this item."
)


class JudgmentExclusionSerializer(serializers.Serializer):
    judgment_id = serializers.IntegerField()
    reason = serializers.CharField(max_length=2000)


class ResolveInputSerializer(serializers.Serializer):
    ratings = serializers.DictField(
        child=serializers.FloatField(min_value=1, max_value=5),
        required=False,
        default=dict,
        help_text="Final rating per question key (1-5); questions left out keep the mean.",
    )
    exclude = JudgmentExclusionSerializer(many=True, required=False, default=list)
    drop = serializers.BooleanField(required=False, default=False)
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


@route("campaigns/<slug:slug>/review/<int:item_id>/resolve", name="review-resolve")
class ReviewResolveApi(APIView):
    @extend_schema(
        tags=TAG,
        request=ResolveInputSerializer,
        responses={
            200: ReviewDetailSerializer,
            400: FieldErrorsSerializer,
            409: ErrorSerializer,
        },
        operation_id="review_resolve",
    )
    def post(self, request: Request, slug: str, item_id: int) -> Response:
        campaign = campaign_or_404(slug)
        item = _load_item(campaign, item_id)
        data = validated(ResolveInputSerializer, request)
        if item.status == ReviewStatus.RESOLVED or (
            item.status == ReviewStatus.CLAIMED and item.claimed_by_id != request.user.pk
        ):
            return Response(
                {"detail": "This item is resolved or held by someone else."},
                status=status.HTTP_409_CONFLICT,
            )
        try:
            review_resolve(
                item=item,
                user=request.user,
                ratings=data["ratings"],
                exclude=[
                    JudgmentExclusionRequest(judgment_id=row["judgment_id"], reason=row["reason"])
                    for row in data["exclude"]
                ],
                drop=data["drop"],
                note=data["note"],
            )
        except ReviewError as error:
            return Response({"detail": str(error)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(ReviewDetailSerializer(_detail_payload(_load_item(campaign, item_id))).data)
