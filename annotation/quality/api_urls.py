"""Curator API of quality control under /api/v1/campaigns/<slug>/ (namespace `annotation_api`):
one module of views per resource."""

from __future__ import annotations

from annotation.quality.api import (
    aggregates,
    agreement,
    audit,
    calibration,
    controls,
    leaderboard,
    retest,
    review,
    runs,
    summary,
    workers,
)
from common.routes import patterns

urlpatterns = patterns(
    summary,
    workers,
    runs,
    retest,
    agreement,
    review,
    audit,
    aggregates,
    leaderboard,
    controls,
    calibration,
)
