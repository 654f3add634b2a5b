"""Worker API (fixed contract) and the curators' campaign API, under /api/v1/ (namespace
`annotation_api`)."""

from __future__ import annotations

from annotation.crowd.api import campaigns, worker
from common.routes import patterns

urlpatterns = patterns(worker, campaigns)
