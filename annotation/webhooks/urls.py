"""Webhook pages, mounted under /dashboard/webhooks/."""

from __future__ import annotations

from annotation.webhooks import views
from common.routes import patterns

app_name = "webhooks"
urlpatterns = patterns(views)
