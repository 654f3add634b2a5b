"""REST API of the annotation app, mounted at /api/v1/."""

from __future__ import annotations

from django.urls import include, path

from annotation.apis import imports

app_name = "annotation_api"
urlpatterns = [
    # Crowd entry, assignments, submissions, campaigns.
    path("", include("annotation.api_urls_crowd")),
    # The import page's uploads: create, list, poll one job.
    path("imports/", imports.ImportUploadListCreateApi.as_view(), name="import-list"),
    path("imports/<int:job_id>/", imports.ImportUploadDetailApi.as_view(), name="import-detail"),
    # Quality control, agreement, review, aggregation.
    path("", include("annotation.quality.api.urls")),
]
