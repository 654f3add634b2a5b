"""REST API of the annotation app, mounted at /api/v1/: each wing's API (docs/architecture.md)."""

from __future__ import annotations

from django.urls import include, path

app_name = "annotation_api"
urlpatterns = [
    # Crowd entry, assignments, submissions, campaigns.
    path("", include("annotation.crowd.api_urls")),
    # Erasure (the worker's own request and a curator's).
    path("", include("annotation.privacy.api_urls")),
    # The import page's uploads: create, list, poll one job.
    path("", include("annotation.imports.api_urls")),
    # Quality control, agreement, review, aggregation.
    path("", include("annotation.quality.api_urls")),
]
