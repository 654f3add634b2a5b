"""Worker-facing pages: /w/<campaign slug>/ (crowd entry, consent, rating)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "worker"
urlpatterns: list[URLPattern | URLResolver] = []
