"""The import page of the dashboard (/dashboard/datasets/imports/): upload a file to import, follow
its job (progress, result or refusal), retry a failed one."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.imports import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("datasets/imports/", views.import_page, name="imports"),
    path("datasets/imports/<int:job_id>/", views.import_detail_page, name="import-detail"),
    path("datasets/imports/<int:job_id>/retry", views.import_retry, name="import-retry"),
]
