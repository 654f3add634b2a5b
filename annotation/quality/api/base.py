"""What the quality API views share (the privacy and webhook APIs too): the schema tag, the campaign
and participation lookups, the checked request body, bounded paging parameters, and the
serializer and list/queue/detail views of a campaign's background runs (QC, calibration)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import models
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import Campaign, Participation
from common.api import ErrorSerializer

TAG = ["quality"]


def campaign_or_404(slug: str) -> Campaign:
    return get_object_or_404(Campaign, slug=slug)


def participation_or_404(campaign: Campaign, participation_id: int) -> Participation:
    """One of the campaign's participations, with its worker and campaign."""
    return get_object_or_404(
        Participation.objects.select_related("worker", "campaign"),
        pk=participation_id,
        campaign=campaign,
    )


# A campaign's background run (QC, calibration); a subclass names the model, and its fields end
# with `RUN_FIELDS`. No docstring: the schema would take it as each subclass's description.
class CampaignRunSerializer(serializers.ModelSerializer):
    campaign: serializers.SlugRelatedField[Campaign] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    status = serializers.CharField(
        read_only=True, help_text="queued, running, succeeded, failed or cancelled."
    )


RUN_FIELDS = [
    "status",
    "progress",
    "progress_message",
    "error",
    "summary",
    "created_at",
    "started_at",
    "finished_at",
]


def bounded_int(raw: str | None, *, default: int, high: int) -> int:
    """A query parameter as an int in [0, high]; `default` when absent or not a number."""
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        value = default
    return max(0, min(value, high))


# The limit/offset window of a list answer: its query parameters in the schema, and the rows it
# selects (100 by default, at most 1000).
PAGE_PARAMETERS = [OpenApiParameter("limit", int), OpenApiParameter("offset", int)]


def page_window(request: Request) -> slice:
    limit = bounded_int(request.query_params.get("limit"), default=100, high=1000)
    offset = bounded_int(request.query_params.get("offset"), default=0, high=10**9)
    return slice(offset, offset + limit)


def campaign_run_apis(
    *,
    model: type[models.Model],
    serializer: type[serializers.ModelSerializer],
    start: Callable[..., Any],
    operation: str,
    start_description: str,
) -> tuple[type[APIView], type[APIView]]:
    """The two views of one kind of campaign run: GET lists the latest 50 and POST queues one
    (`start(campaign=, requested_by=)` returns the run already queued or running if any), and
    GET of one run. Operation ids are `<operation>_list`, `_start` and `_detail`."""

    class RunListApi(APIView):
        @extend_schema(
            tags=TAG, responses={200: serializer(many=True)}, operation_id=f"{operation}_list"
        )
        def get(self, request: Request, slug: str) -> Response:
            campaign = campaign_or_404(slug)
            runs = model._default_manager.filter(campaign=campaign).select_related("campaign")
            return Response(serializer(runs[:50], many=True).data)

        @extend_schema(
            tags=TAG,
            request=None,
            responses={202: serializer},
            operation_id=f"{operation}_start",
            description=start_description,
        )
        def post(self, request: Request, slug: str) -> Response:
            run = start(campaign=campaign_or_404(slug), requested_by=request.user)
            return Response(serializer(run).data, status=status.HTTP_202_ACCEPTED)

    class RunDetailApi(APIView):
        @extend_schema(
            tags=TAG,
            responses={200: serializer, 404: ErrorSerializer},
            operation_id=f"{operation}_detail",
        )
        def get(self, request: Request, slug: str, run_id: int) -> Response:
            campaign = campaign_or_404(slug)
            run = get_object_or_404(
                model._default_manager.select_related("campaign"), pk=run_id, campaign=campaign
            )
            return Response(serializer(run).data)

    return RunListApi, RunDetailApi
