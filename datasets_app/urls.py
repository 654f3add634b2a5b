"""HTML pages of datasets_app, mounted at /dashboard/datasets/."""

from __future__ import annotations

from django.urls import path

from datasets_app import views

app_name = "datasets_app"
urlpatterns = [
    path("", views.data_page, name="data"),
    path("video-jobs/<int:job_id>/retry", views.video_job_retry, name="video-job-retry"),
]
