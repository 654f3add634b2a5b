"""The curator's erase action on a worker's page (/dashboard/campaigns/<slug>/workers/<id>/erase/,
namespace `annotation`)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.privacy import views

urlpatterns: list[URLPattern | URLResolver] = [
    path(
        "campaigns/<slug:slug>/workers/<int:participation_id>/erase/",
        views.worker_erase_view,
        name="quality-worker-erase",
    ),
]
