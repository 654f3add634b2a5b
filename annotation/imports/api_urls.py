"""The import page's uploads over the API, under /api/v1/ (namespace `annotation_api`): create,
list, poll one job."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.imports import api

urlpatterns: list[URLPattern | URLResolver] = [
    path("imports/", api.ImportUploadListCreateApi.as_view(), name="import-list"),
    path("imports/<int:job_id>/", api.ImportUploadDetailApi.as_view(), name="import-detail"),
]
