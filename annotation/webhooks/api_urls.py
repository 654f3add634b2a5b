"""REST API of webhooks, mounted under /api/v1/."""

from __future__ import annotations

from annotation.webhooks import api
from common.routes import patterns

app_name = "webhooks_api"
urlpatterns = patterns(api)
