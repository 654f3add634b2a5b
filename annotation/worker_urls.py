"""Worker-facing pages: /w/<campaign slug>/ (crowd entry, consent, rating)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.crowd.views import worker

app_name = "worker"
urlpatterns: list[URLPattern | URLResolver] = [
    path("<slug:slug>/", worker.worker_entry, name="entry"),
    path("<slug:slug>/erase/", worker.worker_erase_page, name="erase"),
]
