"""Curator pages of export, mounted at /dashboard/releases/."""

from __future__ import annotations

from django.urls import path

from export import views

app_name = "export"
urlpatterns = [
    path("", views.release_list_page, name="list"),
    path("new/", views.release_create_page, name="create"),
    path("<int:release_id>/", views.release_detail_page, name="detail"),
    path(
        "<int:release_id>/compare/<int:other_id>/",
        views.release_compare_page,
        name="compare",
    ),
    path("<int:release_id>/download.zip", views.release_download, name="download"),
    path("<int:release_id>/rerun/", views.release_rerun_page, name="rerun"),
    path("<int:release_id>/cancel/", views.release_cancel_page, name="cancel"),
]
