"""The Data page of the dashboard (/dashboard/datasets/): imports, totals, clips by video status,
video jobs; and the import page (/dashboard/datasets/imports/)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.views import data, imports

urlpatterns: list[URLPattern | URLResolver] = [
    path("datasets/", data.data_page, name="data"),
    path("datasets/video-jobs/<int:job_id>/retry", data.video_job_retry, name="video-job-retry"),
    # Upload a file to import; follow its job (progress, result or refusal).
    path("datasets/imports/", imports.import_page, name="imports"),
    path("datasets/imports/<int:job_id>/", imports.import_detail_page, name="import-detail"),
    path("datasets/imports/<int:job_id>/retry", imports.import_retry, name="import-retry"),
]
