"""`common.broker.publish_now` / `enqueue` (re-exported by `common.tasks`) with a task named by `task_named`: what a service uses to
send the task whose module imports the service (no import back). The broker is replaced by the
task's `apply_async` seam (as in the debouncing tests); a real broker is exercised by the worker
tests."""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError

from common import broker as common_broker
from common.tasks import enqueue, publish_now, task_named


@pytest.fixture
def sent(monkeypatch):  # type: ignore[no-untyped-def]
    calls: list[tuple[tuple[object, ...], dict[str, object], bool]] = []
    monkeypatch.setattr(common_broker, "_broker_down_until", 0.0)
    monkeypatch.setattr(
        "common.tasks.webhook_deliver.apply_async",
        lambda args, kwargs, retry: calls.append((args, kwargs, retry)),
    )
    return calls


def test_a_named_task_is_the_registered_task_with_its_arguments(sent):
    assert publish_now(task_named("common.tasks.webhook_deliver"), 7)
    assert publish_now(task_named("common.tasks.webhook_deliver"), delivery_id=8)
    assert sent == [((7,), {}, False), ((), {"delivery_id": 8}, False)]


def test_a_named_task_is_sent_after_commit(sent, db, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    with django_capture_on_commit_callbacks(execute=True):
        enqueue(task_named("common.tasks.webhook_deliver"), 9)
        assert sent == []  # nothing before the commit
    assert sent == [((9,), {}, False)]


def test_a_failed_publish_of_a_named_task_is_logged_not_raised(monkeypatch, settings):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(common_broker, "_broker_down_until", 0.0)
    settings.LEPUS_BROKER_DOWN_BACKOFF = 30
    attempts: list[object] = []

    def broker_down(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr("common.tasks.webhook_deliver.apply_async", broker_down)
    assert not publish_now(task_named("common.tasks.webhook_deliver"), 10)
    assert not publish_now(task_named("common.tasks.webhook_deliver"), 11)  # within the backoff
    assert len(attempts) == 1
