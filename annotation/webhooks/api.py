"""REST API of webhooks (curators only): endpoints, their deliveries, rotate, redeliver."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.webhooks.services import (
    campaign_slugs,
    delivery_redeliver,
    endpoint_register,
    endpoint_rotate,
)
from common.api import ErrorSerializer, FieldErrorsSerializer, validated
from common.models import WebhookDelivery, WebhookEndpoint
from common.routes import route
from common.webhooks import EVENTS


class EndpointSerializer(serializers.ModelSerializer):
    campaign = serializers.SerializerMethodField()

    class Meta:
        model = WebhookEndpoint
        fields = ["id", "url", "description", "campaign", "events", "active", "created_at"]
        read_only_fields = fields

    def get_campaign(self, endpoint: WebhookEndpoint) -> str | None:
        slugs: dict[int, str] = self.context.get("slugs", {})
        return slugs.get(endpoint.campaign_id) if endpoint.campaign_id else None


class EndpointCreatedSerializer(EndpointSerializer):
    secret = serializers.CharField(read_only=True, help_text="Shown once; keep it to verify.")

    class Meta(EndpointSerializer.Meta):
        fields = [*EndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class EndpointCreateSerializer(serializers.Serializer):
    url = serializers.URLField(max_length=500)
    campaign = serializers.CharField(
        required=False, allow_blank=True, help_text="Slug; empty: all."
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENTS),
        required=False,
        help_text="Empty: every event.",
    )
    description = serializers.CharField(required=False, allow_blank=True, max_length=200)


class DeliverySerializer(serializers.ModelSerializer):
    event = serializers.CharField(source="event.event")
    event_id = serializers.UUIDField(source="event.id")

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event",
            "event_id",
            "status",
            "attempts",
            "response_code",
            "duration_ms",
            "last_error",
            "next_attempt_at",
            "delivered_at",
            "updated_at",
        ]
        read_only_fields = fields


def _context(endpoints: list[WebhookEndpoint]) -> dict[str, Any]:
    return {"slugs": campaign_slugs({e.campaign_id for e in endpoints if e.campaign_id})}


@route("webhooks/", name="endpoints")
class EndpointListCreateApi(APIView):
    @extend_schema(operation_id="webhooks_list", responses={200: EndpointSerializer(many=True)})
    def get(self, request: Request) -> Response:
        endpoints = list(WebhookEndpoint.objects.all()[:500])
        return Response(EndpointSerializer(endpoints, many=True, context=_context(endpoints)).data)

    @extend_schema(
        operation_id="webhooks_create",
        request=EndpointCreateSerializer,
        responses={
            201: EndpointCreatedSerializer,
            400: OpenApiResponse(FieldErrorsSerializer, description="Refused target or campaign."),
        },
    )
    def post(self, request: Request) -> Response:
        data = validated(EndpointCreateSerializer, request)
        try:
            endpoint = endpoint_register(
                url=data["url"],
                events=list(data.get("events") or []),
                campaign_slug=data.get("campaign") or None,
                description=data.get("description", ""),
            )
        except DjangoValidationError as error:
            return Response({"url": error.messages}, status=status.HTTP_400_BAD_REQUEST)
        body = EndpointCreatedSerializer(endpoint, context=_context([endpoint])).data
        return Response(body, status=status.HTTP_201_CREATED)


@route("webhooks/<int:endpoint_id>/", name="endpoint")
class EndpointDetailApi(APIView):
    @extend_schema(
        operation_id="webhooks_retrieve",
        responses={200: EndpointSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, endpoint_id: int) -> Response:
        endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id)
        return Response(EndpointSerializer(endpoint, context=_context([endpoint])).data)

    @extend_schema(operation_id="webhooks_destroy", responses={204: None, 404: ErrorSerializer})
    def delete(self, request: Request, endpoint_id: int) -> Response:
        get_object_or_404(WebhookEndpoint, pk=endpoint_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


@route("webhooks/<int:endpoint_id>/rotate/", name="rotate")
class EndpointRotateApi(APIView):
    @extend_schema(
        operation_id="webhooks_rotate_secret",
        request=None,
        responses={
            200: inline_serializer("WebhookSecret", {"secret": serializers.CharField()}),
            404: ErrorSerializer,
        },
    )
    def post(self, request: Request, endpoint_id: int) -> Response:
        endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id)
        return Response({"secret": endpoint_rotate(endpoint)})


@route("webhooks/<int:endpoint_id>/deliveries/", name="deliveries")
class DeliveryListApi(APIView):
    @extend_schema(
        operation_id="webhooks_deliveries",
        responses={200: DeliverySerializer(many=True), 404: ErrorSerializer},
    )
    def get(self, request: Request, endpoint_id: int) -> Response:
        endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id)
        deliveries = endpoint.deliveries.select_related("event")[:200]
        return Response(DeliverySerializer(deliveries, many=True).data)


@route("webhooks/deliveries/<int:delivery_id>/redeliver/", name="redeliver")
class DeliveryRedeliverApi(APIView):
    @extend_schema(
        operation_id="webhooks_redeliver",
        request=None,
        responses={202: DeliverySerializer, 404: ErrorSerializer},
    )
    def post(self, request: Request, delivery_id: int) -> Response:
        delivery = get_object_or_404(
            WebhookDelivery.objects.select_related("event"), pk=delivery_id
        )
        delivery = delivery_redeliver(delivery)
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
