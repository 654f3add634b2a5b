"""The worker's erase page, under /w/ (namespace `worker`)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.privacy import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("<slug:slug>/erase/", views.worker_erase_page, name="erase"),
]
