"""Fault: Redis down, seen from one web process. The throttles (state in the Redis cache) let
requests through instead of answering 500, and after one failed publish the process stops
waiting on the broker for a while (the periodic sweeps do that work)."""

from __future__ import annotations

import time

import pytest
from kombu.exceptions import OperationalError

from annotation.models import Assignment, AssignmentStatus, Judgment
from common import broker
from common.broker import enqueue
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign
from tests.support.processes import free_port


@pytest.fixture
def dead_redis_cache(settings):  # type: ignore[no-untyped-def]
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        }
    }


@pytest.mark.django_db
def test_join_next_and_submit_work_while_the_throttle_cache_is_down(
    dead_redis_cache, client, settings
):
    from django.core.cache import cache

    with pytest.raises(Exception, match="Connection refused"):
        cache.get("probe")
    campaign = crowd_campaign(slug="nocache", clips=1)
    campaign.status = "active"
    campaign.save(update_fields=["status"])
    joined = client.post(
        "/api/v1/campaigns/nocache/join",
        {"platform": "prolific", "external_id": "nocache-1", "study_id": "s"},
        content_type="application/json",
    )
    assert joined.status_code == 200, joined.content
    auth = {"HTTP_AUTHORIZATION": f"Worker {joined.json()['worker_token']}"}
    offered = client.post("/api/v1/worker/assignments/next", **auth)
    assert offered.status_code == 200, offered.content
    payload = offered.json()
    submitted = client.post(
        f"/api/v1/worker/assignments/{payload['assignment_id']}/submit",
        {"ratings": all_candidate_ratings(payload)},
        content_type="application/json",
        **auth,
    )
    assert submitted.status_code == 201, submitted.content
    assert Assignment.objects.get(pk=payload["assignment_id"]).status == AssignmentStatus.SUBMITTED
    assert Judgment.objects.filter(assignment_id=payload["assignment_id"]).count() == 3


class _UnreachableBrokerTask:
    """Stands in for a task whose broker refuses connections (kombu raises OperationalError);
    a real dead broker is exercised end to end by test_faults_under_load.py."""

    name = "tests.unreachable"

    def __init__(self) -> None:
        self.attempts = 0

    def apply_async(self, **_: object) -> None:
        self.attempts += 1
        raise OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")


@pytest.mark.django_db(transaction=True)
def test_after_a_failed_publish_the_process_skips_the_broker_for_a_while(settings, monkeypatch):
    monkeypatch.setattr(broker, "_broker_down_until", 0.0)
    settings.LEPUS_BROKER_DOWN_BACKOFF = 0.5
    task = _UnreachableBrokerTask()
    enqueue(task, 1)  # no transaction open: published at once, and the failure swallowed
    enqueue(task, 2)
    enqueue(task, 3)
    assert task.attempts == 1
    time.sleep(0.6)
    enqueue(task, 4)
    assert task.attempts == 2
