"""Erasure over the API, under /api/v1/ (namespace `annotation_api`; docs/privacy.md): the worker's
own request and a curator's, beside the quality API's worker routes."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.privacy import api

urlpatterns: list[URLPattern | URLResolver] = [
    path("worker/erase", api.WorkerEraseApi.as_view(), name="worker-erase"),
    path(
        "campaigns/<slug:slug>/quality/workers/<int:participation_id>/erase",
        api.CuratorEraseApi.as_view(),
        name="quality-worker-erase",
    ),
]
