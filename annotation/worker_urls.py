"""Worker-facing pages, mounted at /w/: the crowd wing's rating page (/w/<campaign slug>/) and the
privacy wing's erase page (/w/<campaign slug>/erase/)."""

from __future__ import annotations

from django.urls import include, path

app_name = "worker"
urlpatterns = [
    path("", include("annotation.crowd.worker_urls")),
    path("", include("annotation.privacy.worker_urls")),
]
