"""REST API of the annotation app, mounted at /api/v1/."""

from __future__ import annotations

from django.urls import include, path

app_name = "annotation_api"
urlpatterns = [
    # Crowd entry, assignments, submissions, campaigns.
    path("", include("annotation.api_urls_crowd")),
    # Quality control, agreement, review, aggregation.
    path("", include("annotation.quality.api.urls")),
]
