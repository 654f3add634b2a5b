"""HTML pages of datasets_app."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "datasets_app"
urlpatterns: list[URLPattern | URLResolver] = []
