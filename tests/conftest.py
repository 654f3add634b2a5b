"""Shared fixtures: the named cast of users, a real Celery worker, and S3 on loopback.

The cast (see STYLE.md): `curator` and `admin_user` run campaigns, `outsider` is logged in but has
no role; crowd workers (`worker_a`, `worker_b`) are not Django users and are built per campaign by
`tests/annotation` fixtures.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User

from common.permissions import CURATOR_GROUP
from tests.support.processes import CeleryWorker, purge_broker
from tests.support.storage import point_storage_at_s3


@pytest.fixture(autouse=True, scope="session")
def _no_dns() -> Iterator[None]:
    """No test sends a DNS query for an outside name (tests/support/offline.py)."""
    import socket

    from tests.support.offline import guarded

    original = socket.getaddrinfo
    socket.getaddrinfo = guarded(original)
    try:
        yield
    finally:
        socket.getaddrinfo = original


@pytest.fixture(autouse=True)
def _isolated_media_root(tmp_path: Path, settings) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Every test gets its own local storage folder."""
    media = tmp_path / "media"
    media.mkdir()
    settings.MEDIA_ROOT = media
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(media), "base_url": "/media/"},
        },
    }
    yield


@pytest.fixture(autouse=True)
def _broker_reachable_again() -> None:
    """A publish that failed in an earlier test must not make this one skip the broker."""
    import common.broker

    common.broker._broker_down_until = 0.0


@pytest.fixture(autouse=True)
def _no_quality_mark_remembered() -> None:
    """The quality debounce's memory of marks held (annotation.crowd.debouncing) is per process;
    a mark an earlier test set must not silence this test's first submission."""
    from annotation.crowd import debouncing

    debouncing._held_until.clear()


@pytest.fixture
def curator(db) -> User:  # type: ignore[no-untyped-def]
    user = User.objects.create_user("curator", "curator@example.org", "curator-password-1")
    group, _ = Group.objects.get_or_create(name=CURATOR_GROUP)
    user.groups.add(group)
    return user


@pytest.fixture
def second_curator(db) -> User:  # type: ignore[no-untyped-def]
    user = User.objects.create_user("curator2", "curator2@example.org", "curator-password-2")
    group, _ = Group.objects.get_or_create(name=CURATOR_GROUP)
    user.groups.add(group)
    return user


@pytest.fixture
def admin_user(db) -> User:  # type: ignore[no-untyped-def]
    return User.objects.create_superuser("admin", "admin@example.org", "admin-password-1")


@pytest.fixture
def outsider(db) -> User:  # type: ignore[no-untyped-def]
    return User.objects.create_user("outsider", "outsider@example.org", "outsider-password-1")


@pytest.fixture
def curator_client(client, curator):  # type: ignore[no-untyped-def]
    client.force_login(curator)
    return client


@pytest.fixture
def celery_worker_process(transactional_db) -> Iterator[CeleryWorker]:  # type: ignore[no-untyped-def]
    """A real `celery worker` process on the test broker and the test database."""
    purge_broker()
    worker = CeleryWorker().start()
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def chromium() -> Iterator[object]:
    """Debian's Chromium, launched for one browser test (tests/support/browser.py)."""
    from tests.support.browser import chromium_browser

    with chromium_browser() as browser:
        yield browser


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3-speaking server on a loopback port; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    from tests.support.processes import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_storage(s3_server: str, settings, monkeypatch) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """Point the default storage at a fresh bucket on the loopback S3 server; yields the bucket."""
    import uuid

    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    bucket = f"lepus-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    point_storage_at_s3(settings, s3_server, bucket)
    yield bucket


def pytest_sessionfinish(session, exitstatus):  # type: ignore[no-untyped-def]
    # Only the process that named the folder (config/test_settings.py) removes it: xdist workers
    # inherit the controller's, and a worker that finished first would pull it from under the
    # other's Celery worker logs.
    var_dir = Path(settings.VAR_DIR)
    if var_dir.name == f"lepus-test-var-{os.getpid()}":
        shutil.rmtree(var_dir, ignore_errors=True)
