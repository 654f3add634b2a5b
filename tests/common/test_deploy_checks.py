"""Lepus's own `check --deploy` warnings (issue 25, point 8; `common/checks.py`): each fires on
the setting it names and on nothing else, starting from a production configuration that has none
(the command itself runs in tests/hardening/test_hostile_input.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks

from common.checks import REDIS_CACHE_BACKEND, deploy_checks

PRODUCTION: dict[str, Any] = {
    "CACHES": {"default": {"BACKEND": REDIS_CACHE_BACKEND, "LOCATION": "redis://cache:6379/1"}},
    "LEPUS_S3_BUCKET": "lepus-media",
    "CELERY_BROKER_URL": "amqp://broker:5672//",
    "LEPUS_WEBHOOK_ALLOW_PRIVATE": False,
    "LEPUS_CHECK_WORKER_IDS": True,
    "ALLOWED_HOSTS": ["lepus.example.org"],
    "LEPUS_RELEASE_PSEUDONYM_SECRET": "a-long-random-pseudonym-secret",
}


def _ids(settings, **changes: Any) -> list[str]:  # type: ignore[no-untyped-def]
    for name, value in {**PRODUCTION, **changes}.items():
        setattr(settings, name, value)
    return [message.id for message in deploy_checks()]


def test_a_production_configuration_gets_no_warning(settings):
    assert _ids(settings) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"CACHES": {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}},
            "W001",
        ),
        (
            {"CACHES": {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache"}}},
            "W001",
        ),
        ({"LEPUS_S3_BUCKET": ""}, "W002"),
        ({"CELERY_BROKER_URL": "filesystem://"}, "W003"),
        ({"LEPUS_WEBHOOK_ALLOW_PRIVATE": True}, "W004"),
        ({"LEPUS_CHECK_WORKER_IDS": False}, "W005"),
        ({"ALLOWED_HOSTS": ["localhost", "127.0.0.1", "[::1]"]}, "W007"),
        ({"ALLOWED_HOSTS": ["*"]}, "W007"),
        ({"LEPUS_RELEASE_PSEUDONYM_SECRET": ""}, "W008"),
    ],
)
def test_each_weakened_setting_gets_its_own_warning(settings, changes, expected):
    assert _ids(settings, **changes) == [f"lepus.{expected}"]


def test_the_warnings_are_deploy_checks_only(settings):
    """`manage.py check` without --deploy (the suite, `make demo`) stays quiet about them."""
    _ids(settings, LEPUS_S3_BUCKET="")
    everyday = [message.id for message in checks.run_checks(include_deployment_checks=False)]
    deploy = [message.id for message in checks.run_checks(include_deployment_checks=True)]
    assert "lepus.W002" not in everyday
    assert "lepus.W002" in deploy
