"""The rating page, under /w/ (namespace `worker`): crowd entry, consent, rating."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.crowd.views import worker

urlpatterns: list[URLPattern | URLResolver] = [
    path("<slug:slug>/", worker.worker_entry, name="entry"),
]
