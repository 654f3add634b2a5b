"""The worker table with each worker's QC statistics and flags; a curator's exclusion and
re-inclusion of a worker (erasure of the person behind it is the privacy wing's).

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import Campaign, Participation
from annotation.quality.api.base import TAG, campaign_or_404, validated
from annotation.quality.exclusions import worker_exclude, worker_include
from annotation.quality.selectors import WORKER_SORTS, statistic_explanations, worker_rows
from common.api import ErrorSerializer


class FlagSerializer(serializers.Serializer):
    rule = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label
    action = serializers.ChoiceField(choices=["exclude", "flag"])
    explanation = serializers.CharField()
    numbers = serializers.DictField()
    override = serializers.BooleanField(required=False)


class StandingExclusionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    rules = serializers.ListField(child=serializers.CharField())
    judgments_excluded = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    by_curator = serializers.BooleanField()


class SeveritySummarySerializer(serializers.Serializer):
    severity = serializers.FloatField(help_text="Logits; > 0 is harsher than average.")
    standard_error = serializers.FloatField()
    low = serializers.FloatField(help_text="severity - 1.96 standard errors.")
    high = serializers.FloatField(help_text="severity + 1.96 standard errors.")


class WorkerRowSerializer(serializers.Serializer):
    participation = serializers.IntegerField()
    worker = serializers.CharField(help_text="External id on the crowd platform.")
    platform = serializers.CharField()
    imported = serializers.BooleanField()
    status = serializers.CharField()
    judgments = serializers.IntegerField()
    median_seconds = serializers.FloatField(allow_null=True)
    speed_vs_campaign = serializers.FloatField(allow_null=True)
    speed_vs_clip_length = serializers.FloatField(allow_null=True)
    uniform_share = serializers.FloatField(allow_null=True)
    rating_variance = serializers.FloatField(allow_null=True)
    control_items = serializers.IntegerField()
    control_accuracy = serializers.FloatField(allow_null=True)
    agreement = serializers.FloatField(allow_null=True)
    severity = SeveritySummarySerializer(
        allow_null=True, help_text="From the latest calibration, averaged over the questions."
    )
    severities = serializers.DictField(
        child=SeveritySummarySerializer(), help_text="Per question, from the latest calibration."
    )
    flags = FlagSerializer(many=True)
    exclusion = StandingExclusionSerializer(allow_null=True)
    computed_at = serializers.DateTimeField(allow_null=True)


class WorkerListSerializer(serializers.Serializer):
    statistics = serializers.DictField(child=serializers.CharField())
    workers = WorkerRowSerializer(many=True)


class WorkerListApi(APIView):
    @extend_schema(
        tags=TAG,
        parameters=[
            OpenApiParameter("sort", str, enum=sorted(WORKER_SORTS)),
            OpenApiParameter("order", str, enum=["asc", "desc"]),
        ],
        responses={200: WorkerListSerializer},
        operation_id="quality_workers",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        sort = request.query_params.get("sort", "worker")
        rows = worker_rows(
            campaign=campaign,
            sort=sort if sort in WORKER_SORTS else "worker",
            descending=request.query_params.get("order") == "desc",
        )
        return Response(
            WorkerListSerializer({"statistics": statistic_explanations(), "workers": rows}).data
        )


class ExcludeInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ExcludeOutputSerializer(serializers.Serializer):
    participation = serializers.IntegerField()
    status = serializers.CharField()
    judgments_excluded = serializers.IntegerField()


class IncludeInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class IncludeOutputSerializer(serializers.Serializer):
    participation = serializers.IntegerField()
    status = serializers.CharField()
    judgments_included = serializers.IntegerField()
    judgments_kept_out = serializers.IntegerField(
        help_text="Judgments left excluded because other workers refilled their slots."
    )


def _participation(campaign: Campaign, participation_id: int) -> Participation:
    return get_object_or_404(
        Participation.objects.select_related("worker", "campaign"),
        pk=participation_id,
        campaign=campaign,
    )


ERASED_MEANWHILE = "the worker's participation was erased while this request ran"
Outcome = TypeVar("Outcome")


class WorkerExcludeApi(APIView):
    @extend_schema(
        tags=TAG,
        request=ExcludeInputSerializer,
        responses={200: ExcludeOutputSerializer, 404: ErrorSerializer},
        operation_id="quality_worker_exclude",
    )
    def post(self, request: Request, slug: str, participation_id: int) -> Response:
        campaign = campaign_or_404(slug)
        participation = _participation(campaign, participation_id)
        reason = validated(ExcludeInputSerializer, request)["reason"]
        outcome = _unless_erased(
            participation,
            lambda: worker_exclude(participation=participation, actor=request.user, reason=reason),
        )
        return Response(
            ExcludeOutputSerializer(
                {
                    "participation": participation.pk,
                    "status": participation.status,
                    "judgments_excluded": outcome.judgments_excluded,
                }
            ).data
        )


def _unless_erased(participation: Participation, change: Callable[[], Outcome]) -> Outcome:
    """`change()`, then the participation as it is now; 404 when an erasure deleted it between
    the lookup and here."""
    try:
        outcome = change()
        participation.refresh_from_db()
    except Participation.DoesNotExist as error:
        raise NotFound(ERASED_MEANWHILE) from error
    return outcome


class WorkerIncludeApi(APIView):
    @extend_schema(
        tags=TAG,
        request=IncludeInputSerializer,
        responses={200: IncludeOutputSerializer, 404: ErrorSerializer},
        operation_id="quality_worker_include",
    )
    def post(self, request: Request, slug: str, participation_id: int) -> Response:
        campaign = campaign_or_404(slug)
        participation = _participation(campaign, participation_id)
        note = validated(IncludeInputSerializer, request)["note"]
        outcome = _unless_erased(
            participation,
            lambda: worker_include(participation=participation, actor=request.user, note=note),
        )
        return Response(
            IncludeOutputSerializer(
                {
                    "participation": participation.pk,
                    "status": participation.status,
                    "judgments_included": outcome.judgments_included,
                    "judgments_kept_out": outcome.judgments_kept_out,
                }
            ).data
        )
