"""The Data page of the dashboard (/dashboard/datasets/): imports, totals, clips by video status,
video jobs."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.views import data

urlpatterns: list[URLPattern | URLResolver] = [
    path("datasets/", data.data_page, name="data"),
    path("datasets/video-jobs/<int:job_id>/retry", data.video_job_retry, name="video-job-retry"),
]
