"""REST API (mounted under /api/v1/) of training_bridge."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "training_bridge_api"
urlpatterns: list[URLPattern | URLResolver] = []
