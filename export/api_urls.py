"""REST API (mounted under /api/v1/) of export."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "export_api"
urlpatterns: list[URLPattern | URLResolver] = []
