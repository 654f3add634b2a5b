"""Erasure over the API, under /api/v1/ (namespace `annotation_api`; docs/privacy.md)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.privacy import api

urlpatterns: list[URLPattern | URLResolver] = [
    path("worker/erase", api.WorkerEraseApi.as_view(), name="worker-erase"),
]
