"""REST API (mounted under /api/v1/) of datasets_app."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "datasets_app_api"
urlpatterns: list[URLPattern | URLResolver] = []
