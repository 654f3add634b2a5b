"""Curator dashboard pages of the annotation app, mounted at /dashboard/."""

from __future__ import annotations

from django.urls import include, path

app_name = "annotation"
urlpatterns = [
    # The Data page: imports, platform totals, video jobs (before the campaign routes).
    path("", include("annotation.urls_data")),
    # Campaign list, creation and editing, payments export (crowd flow).
    path("", include("annotation.urls_campaigns")),
    # Quality control, agreement, review queue, leaderboard.
    path("", include("annotation.quality.urls")),
]
