"""HTML pages of export."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "export"
urlpatterns: list[URLPattern | URLResolver] = []
