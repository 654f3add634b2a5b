"""REST API of the annotation app, mounted at /api/v1/: each wing's API (docs/architecture.md)."""

from __future__ import annotations

from django.urls import include, path

app_name = "annotation_api"
# Each wing's API, in this order: crowd entry, assignments, submissions, campaigns; erasure (the
# worker's own request and a curator's); the import page's uploads (create, list, poll one job);
# quality control, agreement, review, aggregation.
WINGS = ("crowd", "privacy", "imports", "quality")

urlpatterns = [path("", include(f"annotation.{wing}.api_urls")) for wing in WINGS]
