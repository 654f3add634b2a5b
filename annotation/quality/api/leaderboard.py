"""Mean human score per captioning system of a campaign.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.quality.api.base import TAG, campaign_or_404
from annotation.quality.selectors import system_leaderboard
from common.routes import route


class LeaderboardRowSerializer(serializers.Serializer):
    system = serializers.CharField()
    candidates = serializers.IntegerField()
    finalised = serializers.IntegerField()
    overall = serializers.FloatField(allow_null=True)
    normalized = serializers.FloatField(allow_null=True)
    questions = serializers.DictField(child=serializers.FloatField(allow_null=True))


@route("campaigns/<slug:slug>/leaderboard", name="leaderboard")
class LeaderboardApi(APIView):
    @extend_schema(
        tags=TAG,
        parameters=[
            OpenApiParameter("sort", str),
            OpenApiParameter("order", str, enum=["asc", "desc"]),
        ],
        responses={200: LeaderboardRowSerializer(many=True)},
        operation_id="leaderboard",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        board = system_leaderboard(
            campaign=campaign,
            sort=request.query_params.get("sort", "overall"),
            descending=request.query_params.get("order", "desc") == "desc",
        )
        return Response(LeaderboardRowSerializer(board, many=True).data)
