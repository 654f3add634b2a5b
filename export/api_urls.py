"""REST API (mounted under /api/v1/) of export: releases, curators only."""

from __future__ import annotations

from django.urls import path

from export import apis

app_name = "export_api"
urlpatterns = [
    path("releases/", apis.ReleaseListCreateApi.as_view(), name="releases"),
    path("releases/<int:release_id>/", apis.ReleaseDetailApi.as_view(), name="release"),
    path(
        "releases/<int:release_id>/compare/<int:other_id>/",
        apis.ReleaseCompareApi.as_view(),
        name="compare",
    ),
    path("releases/<int:release_id>/rerun/", apis.ReleaseRerunApi.as_view(), name="rerun"),
    path("releases/<int:release_id>/cancel/", apis.ReleaseCancelApi.as_view(), name="cancel"),
]
