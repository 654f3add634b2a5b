"""REST API (mounted under /api/v1/) of training_bridge."""

from __future__ import annotations

from common.routes import patterns
from training_bridge import apis

app_name = "training_bridge_api"
urlpatterns = patterns(apis)
