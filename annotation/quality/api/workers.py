"""The worker table with each worker's QC statistics and flags; a curator's exclusion and
re-inclusion of a worker (erasure of the person behind it is the privacy wing's).

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import Participation
from annotation.quality.api.base import TAG, campaign_or_404, participation_or_404
from annotation.quality.exclusions import worker_exclude, worker_include
from annotation.quality.selectors import WORKER_SORTS, statistic_explanations, worker_rows
from common.api import ErrorSerializer, validated
from common.routes import route


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


@route("campaigns/<slug:slug>/quality/workers", name="quality-workers")
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


class _WorkerChangeOutputSerializer(serializers.Serializer):
    participation = serializers.IntegerField()
    status = serializers.CharField()


class ExcludeOutputSerializer(_WorkerChangeOutputSerializer):
    judgments_excluded = serializers.IntegerField()


class IncludeInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class IncludeOutputSerializer(_WorkerChangeOutputSerializer):
    judgments_included = serializers.IntegerField()
    judgments_kept_out = serializers.IntegerField(
        help_text="Judgments left excluded because other workers refilled their slots."
    )


ERASED_MEANWHILE = "the worker's participation was erased while this request ran"
Outcome = TypeVar("Outcome")


def _worker_change_api(
    *,
    action: str,
    body: type[serializers.Serializer],
    output: type[serializers.Serializer],
    change: Callable[[Participation, Any, Mapping[str, Any]], Outcome],
    counts: Callable[[Outcome], Mapping[str, int]],
) -> type[APIView]:
    """The view that excludes or includes one worker: `change(participation, actor, checked body)`,
    then the participation as it is afterwards with the judgment `counts` of the outcome; 404 when
    an erasure deleted the participation between the lookup and here. `Worker<Action>Api`,
    operation `quality_worker_<action>`, mounted at `.../quality/workers/<participation_id>/<action>`
    as `quality-worker-<action>`."""

    class WorkerChangeApi(APIView):
        @extend_schema(
            tags=TAG,
            request=body,
            responses={200: output, 404: ErrorSerializer},
            operation_id=f"quality_worker_{action}",
        )
        def post(self, request: Request, slug: str, participation_id: int) -> Response:
            participation = participation_or_404(campaign_or_404(slug), participation_id)
            data = validated(body, request)
            try:
                outcome = change(participation, request.user, data)
                participation.refresh_from_db()
            except Participation.DoesNotExist as error:
                raise NotFound(ERASED_MEANWHILE) from error
            payload = {"participation": participation.pk, "status": participation.status}
            return Response(output({**payload, **counts(outcome)}).data)

    WorkerChangeApi.__name__ = WorkerChangeApi.__qualname__ = f"Worker{action.title()}Api"
    pattern = f"campaigns/<slug:slug>/quality/workers/<int:participation_id>/{action}"
    return route(pattern, name=f"quality-worker-{action}")(WorkerChangeApi)


WorkerExcludeApi = _worker_change_api(
    action="exclude",
    body=ExcludeInputSerializer,
    output=ExcludeOutputSerializer,
    change=lambda participation, actor, data: worker_exclude(
        participation=participation, actor=actor, reason=data["reason"]
    ),
    counts=lambda outcome: {"judgments_excluded": outcome.judgments_excluded},
)
WorkerIncludeApi = _worker_change_api(
    action="include",
    body=IncludeInputSerializer,
    output=IncludeOutputSerializer,
    change=lambda participation, actor, data: worker_include(
        participation=participation, actor=actor, note=data["note"]
    ),
    counts=lambda outcome: {
        "judgments_included": outcome.judgments_included,
        "judgments_kept_out": outcome.judgments_kept_out,
    },
)
