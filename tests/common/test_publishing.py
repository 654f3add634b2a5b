"""Sending a task by its registered name (`task_named`): the message is the one the task object would send
(same task name, arguments and queue), after commit when enqueued."""

from __future__ import annotations

import base64
import json

import redis
from django.conf import settings

from common.broker import enqueue, publish_now, task_named
from tests.support.processes import purge_broker


def waiting(queue: str) -> list[tuple[str, list[object]]]:
    """(task name, args) of the messages waiting in one queue of the test broker (kombu's Redis
    transport keeps each message as JSON with a base64 body of [args, kwargs, embed])."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    messages = [json.loads(raw) for raw in broker.lrange(queue, 0, -1)]
    return [
        (message["headers"]["task"], json.loads(base64.b64decode(message["body"]))[0])
        for message in messages
    ]


def test_a_task_sent_by_name_goes_to_its_routed_queue(db):
    purge_broker()
    assert publish_now(task_named("export.build_release"), 41)
    assert publish_now(task_named("training_bridge.tasks.score_request"), 42)
    assert waiting("default") == [("export.build_release", [41])]
    assert waiting("training") == [("training_bridge.tasks.score_request", [42])]
    purge_broker()


def test_a_task_enqueued_by_name_is_sent_once_the_transaction_commits(
    db, django_capture_on_commit_callbacks
):
    purge_broker()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        enqueue(task_named("datasets_app.attach_videos"), 7)
    assert waiting("default") == []  # nothing before the commit
    assert len(callbacks) == 1
    callbacks[0]()
    assert waiting("default") == [("datasets_app.attach_videos", [7])]
    purge_broker()
