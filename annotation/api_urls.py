"""REST API (mounted under /api/v1/) of annotation."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "annotation_api"
urlpatterns: list[URLPattern | URLResolver] = []
