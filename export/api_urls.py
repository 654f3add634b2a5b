"""REST API (mounted under /api/v1/) of export: releases, curators only."""

from __future__ import annotations

from common.routes import patterns
from export import apis

app_name = "export_api"
urlpatterns = patterns(apis)
