"""HTML pages of annotation."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "annotation"
urlpatterns: list[URLPattern | URLResolver] = []
