"""HTML pages of training_bridge."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "training_bridge"
urlpatterns: list[URLPattern | URLResolver] = []
