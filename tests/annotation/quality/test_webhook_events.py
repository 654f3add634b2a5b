"""The quality services emit their webhook events into the outbox, scoped to the campaign."""

from __future__ import annotations

import pytest

from annotation.quality.exclusions import worker_exclude
from common import webhooks
from common.models import WebhookDelivery, WebhookEvent
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db


def test_worker_exclusion_emits_to_the_campaigns_and_global_endpoints_only(curator, settings):
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    campaign = quality_crowd_campaign(clips=1, candidates_per_clip=2, quota=2)
    mine = webhooks.register_endpoint("http://127.0.0.1:9/a", campaign_id=campaign.pk)
    everyone = webhooks.register_endpoint("http://127.0.0.1:9/b")
    webhooks.register_endpoint(
        "http://127.0.0.1:9/c", campaign_id=campaign.pk + 1
    )  # another campaign
    webhooks.register_endpoint("http://127.0.0.1:9/d", events=["release.built"])
    worker = quality_worker(campaign, "someone")
    for item in campaign.items.all():
        quality_judge(worker, item, {"descriptiveness": 4, "relevance": 4, "fluency": 4})

    worker_exclude(participation=worker, actor=curator, reason="copied answers")

    event = WebhookEvent.objects.get()
    assert event.event == "worker.excluded" and event.campaign_id == campaign.pk
    assert event.data["participation_id"] == worker.pk
    assert event.data["judgments_excluded"] == 2
    assert set(WebhookDelivery.objects.values_list("endpoint_id", flat=True)) == {
        mine.pk,
        everyone.pk,
    }
