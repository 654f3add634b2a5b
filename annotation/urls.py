"""Curator dashboard pages of the annotation app, mounted at /dashboard/: each wing's pages
(docs/architecture.md)."""

from __future__ import annotations

from django.urls import include, path

app_name = "annotation"
urlpatterns = [
    # The Data page and the data browser (before the campaign routes).
    path("", include("annotation.curation.urls")),
    # The import page under the Data page.
    path("", include("annotation.imports.urls")),
    # Campaign list, creation and editing, payments export, the preview (before quality's
    # campaigns/<slug>/, which would take campaigns/new/).
    path("", include("annotation.crowd.urls")),
    # Quality control, agreement, review queue, leaderboard.
    path("", include("annotation.quality.urls")),
    # The curator's erase action on a worker's page.
    path("", include("annotation.privacy.urls")),
]
