"""Curator dashboard pages of the annotation app, mounted at /dashboard/: each wing's pages
(docs/architecture.md)."""

from __future__ import annotations

from django.urls import include, path

app_name = "annotation"
# Each wing's pages, in the order Django tries them.
WINGS = (
    # The Data page and the data browser (before the campaign routes).
    "curation",
    # The import page under the Data page.
    "imports",
    # Campaign list, creation and editing, payments export, the preview (before quality's
    # campaigns/<slug>/, which would take campaigns/new/).
    "crowd",
    # Quality control, agreement, review queue, leaderboard.
    "quality",
    # The curator's erase action on a worker's page.
    "privacy",
)

urlpatterns = [path("", include(f"annotation.{wing}.urls")) for wing in WINGS]
