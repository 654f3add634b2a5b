"""Curator pages of export, mounted at /dashboard/releases/."""

from __future__ import annotations

from common.routes import patterns
from export import views

app_name = "export"
urlpatterns = patterns(views)
