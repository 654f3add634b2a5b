"""Per-candidate aggregates of a campaign (control items left out), paged.

Curators only (the DRF default `IsCurator`); one view per operation: validate → service →
serialize."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.models import CampaignCandidate
from annotation.quality.aggregation import AGGREGATE_FIELDS
from annotation.quality.api.base import PAGE_PARAMETERS, TAG, campaign_or_404, page_window
from common.routes import route


class AggregateSerializer(serializers.ModelSerializer):
    external_id = serializers.CharField(source="candidate.external_id")
    clip = serializers.CharField(source="clip.vatex_id")
    system = serializers.SerializerMethodField()

    class Meta:
        model = CampaignCandidate
        fields = ["id", "external_id", "clip", "system", "quota", *AGGREGATE_FIELDS, "dropped"]

    def get_system(self, item: CampaignCandidate) -> str | None:
        system = item.candidate.system
        return str(system) if system else None


class AggregatePageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    results = AggregateSerializer(many=True)


@route("campaigns/<slug:slug>/aggregates", name="aggregates")
class AggregateListApi(APIView):
    @extend_schema(
        tags=TAG,
        parameters=[OpenApiParameter("finalised", bool), *PAGE_PARAMETERS],
        responses={200: AggregatePageSerializer},
        operation_id="aggregates_list",
        description="Per-candidate aggregates (control items left out).",
    )
    def get(self, request: Request, slug: str) -> Response:
        campaign = campaign_or_404(slug)
        items = (
            CampaignCandidate.objects.filter(campaign=campaign, is_control=False)
            .select_related("candidate__system", "clip")
            .order_by("id")
        )
        if request.query_params.get("finalised") in ("1", "true", "yes"):
            items = items.filter(is_finalised=True)
        return Response(
            AggregatePageSerializer(
                {"count": items.count(), "results": items[page_window(request)]}
            ).data
        )
