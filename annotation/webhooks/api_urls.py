"""REST API of webhooks, mounted under /api/v1/."""

from __future__ import annotations

from django.urls import path

from annotation.webhooks import api

app_name = "webhooks_api"
urlpatterns = [
    path("webhooks/", api.EndpointListCreateApi.as_view(), name="endpoints"),
    path("webhooks/<int:endpoint_id>/", api.EndpointDetailApi.as_view(), name="endpoint"),
    path("webhooks/<int:endpoint_id>/rotate/", api.EndpointRotateApi.as_view(), name="rotate"),
    path(
        "webhooks/<int:endpoint_id>/deliveries/",
        api.DeliveryListApi.as_view(),
        name="deliveries",
    ),
    path(
        "webhooks/deliveries/<int:delivery_id>/redeliver/",
        api.DeliveryRedeliverApi.as_view(),
        name="redeliver",
    ),
]
