"""Fixtures shared by the quality tests."""

from __future__ import annotations

import pytest

from annotation.quality.run import qc_campaign_full
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

KEYS = ("descriptiveness", "relevance", "fluency")


@pytest.fixture
def quality_campaign():
    """The campaign `qdash`: three workers, six candidates, a full QC run done."""
    campaign = quality_crowd_campaign(slug="qdash", clips=3, candidates_per_clip=2, quota=3)
    items = list(campaign.items.order_by("id"))
    patterns = [(1, 2, 3), (5, 4, 3), (3, 3, 4)]
    for index, pattern in enumerate(patterns):
        worker = quality_worker(campaign, f"dash-{index}")
        for position, item in enumerate(items):
            values = {
                key: 1 + (value + position) % 5 for key, value in zip(KEYS, pattern, strict=True)
            }
            quality_judge(worker, item, values, server_ms=12_000 + 1000 * index)
    qc_campaign_full(campaign=campaign)
    return campaign
