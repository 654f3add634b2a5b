"""The demo's own webhook receiver (issue 24, point 6: "webhooks cannot be tried in the demo at
all"), and the SSRF protections it leaves as they were.

With `LEPUS_DEMO_WEBHOOK_RECEIVER` set to the demo's loopback origin, a curator registers the
receiver from its page in Chromium, an event is emitted, a real Celery worker POSTs it over
loopback to the live server, and the receiver page shows it with a verified signature. Without
the setting, loopback stays refused (registration and the receiver's URLs alike); with it, only
that exact URL is allowed; and the settings refuse the variable when DEBUG is off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import transaction
from django.test import Client

from common import webhooks
from common.models import WebhookDelivery, WebhookDeliveryStatus, WebhookEndpoint
from tests.support.browser import (
    VIEWPORTS,
    assert_fits_viewport,
    chromium_browser,
    log_in,
    page_at,
)
from tests.support.processes import CeleryWorker, purge_broker, wait_until

RECEIVER_PAGE = "/dashboard/webhooks/demo-receiver/"
REPO_ROOT = Path(__file__).resolve().parents[3]


def _receiver_file() -> Path:
    return Path(django_settings.VAR_DIR) / "demo-webhook-receiver.jsonl"


@pytest.fixture
def demo_worker(live_server, settings, tmp_path) -> Iterator[CeleryWorker]:  # type: ignore[no-untyped-def]
    """The demo's settings in this process and in a real Celery worker: the receiver at the live
    server's origin, nothing else private allowed."""
    settings.LEPUS_DEMO_WEBHOOK_RECEIVER = live_server.url
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    settings.VAR_DIR = tmp_path
    purge_broker()
    worker = CeleryWorker(
        extra_env={
            "DJANGO_DEBUG": "1",
            "LEPUS_DEMO_WEBHOOK_RECEIVER": live_server.url,
            "LEPUS_WEBHOOK_ALLOW_PRIVATE": "false",
            "LEPUS_VAR_DIR": str(tmp_path),
        }
    ).start()
    try:
        yield worker
    finally:
        worker.stop()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_demo_sees_a_signed_delivery_arrive(live_server, demo_worker, curator, tmp_path):
    receiver_url = f"{live_server.url}{webhooks.DEMO_RECEIVER_PATH}"
    shots = Path(os.environ.get("LEPUS_SCREENSHOTS") or tmp_path) / "webhooks"
    shots.mkdir(parents=True, exist_ok=True)
    with chromium_browser() as browser:
        page = page_at(browser, "wide")
        log_in(
            page,
            f"{live_server.url}/dashboard/webhooks/",
            username="curator",
            password="curator-password-1",
        )
        note = page.locator("[data-demo-receiver]")
        assert receiver_url in note.inner_text()
        note.get_by_role("link").click()
        page.wait_for_url(f"**{RECEIVER_PAGE}")
        assert page.locator("[data-empty]").inner_text() == "Nothing received yet."
        page.get_by_role("button", name="Register this receiver for every event").click()
        page.wait_for_url("**/dashboard/webhooks/*/")
        endpoint = WebhookEndpoint.objects.get()
        assert (endpoint.url, endpoint.events, endpoint.campaign_id) == (receiver_url, [], None)

        with transaction.atomic():
            event = webhooks.emit(
                "worker.excluded",
                {"participation_id": 7, "rules": ["low_agreement"], "judgments_excluded": 24},
            )
        assert event is not None
        wait_until(
            lambda: WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.SUCCEEDED).exists(),
            timeout=60,
            message="the delivery to the demo receiver",
        )
        delivery = WebhookDelivery.objects.get()
        assert (delivery.attempts, delivery.response_code, delivery.last_error) == (1, 200, "")

        page.goto(f"{live_server.url}{RECEIVER_PAGE}")
        row = page.locator(f'li[data-received="{event.id}"]')
        assert row.locator('[data-field="event"]').inner_text() == "worker.excluded"
        assert row.locator('[data-field="signature"]').inner_text() == "valid"
        assert '"judgments_excluded": 24' in row.locator("pre").inner_text()
        assert page.locator("[data-endpoint]").inner_text() == f"endpoint {endpoint.pk}"
        for width in VIEWPORTS:
            view = page_at(browser, width)
            view.context.add_cookies(page.context.cookies())
            for name, path in (("list", "/dashboard/webhooks/"), ("receiver", RECEIVER_PAGE)):
                view.goto(f"{live_server.url}{path}")
                view.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
                assert_fits_viewport(view)
            view.context.close()
    lines = _receiver_file().read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and str(event.id) in lines[0]


@pytest.mark.django_db
def test_without_the_setting_loopback_is_refused_and_there_is_no_receiver(
    settings, curator, tmp_path
):
    settings.LEPUS_DEMO_WEBHOOK_RECEIVER = ""
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    settings.VAR_DIR = tmp_path
    with pytest.raises(webhooks.WebhookTargetRefused):
        webhooks.register_endpoint(f"http://127.0.0.1:8000{webhooks.DEMO_RECEIVER_PATH}")
    assert WebhookEndpoint.objects.count() == 0
    assert webhooks.demo_receiver_url() is None
    anonymous = Client()
    assert anonymous.post(webhooks.DEMO_RECEIVER_PATH, b"{}", "application/json").status_code == 404
    signed_in = Client()
    signed_in.force_login(curator)
    assert signed_in.get(RECEIVER_PAGE).status_code == 404
    page = signed_in.get("/dashboard/webhooks/").content.decode()
    assert "data-demo-receiver" not in page
    assert not _receiver_file().exists()


@pytest.mark.django_db
def test_the_create_page_puts_a_refused_url_on_its_field(settings, curator):
    """The registration service's refusal comes back on the form's URL field (status 400), and
    nothing is stored."""
    settings.LEPUS_DEMO_WEBHOOK_RECEIVER = ""
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    client = Client()
    client.force_login(curator)
    response = client.post("/dashboard/webhooks/new/", {"url": "http://127.0.0.1:8000/hook"})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["url"]
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.django_db
def test_with_the_setting_only_the_receiver_itself_is_allowed_on_loopback(settings):
    settings.LEPUS_DEMO_WEBHOOK_RECEIVER = "http://127.0.0.1:8000"
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    path = webhooks.DEMO_RECEIVER_PATH
    for url in (
        f"http://127.0.0.1:8001{path}",  # another port
        "http://127.0.0.1:8000/hook",  # another path
        f"http://127.0.0.1:8000{path}?next=/admin/",  # a query
        f"http://localhost:8000{path}",  # another spelling of the host
        f"http://127.0.0.2:8000{path}",
        f"https://127.0.0.1:8000{path}",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
    ):
        with pytest.raises(webhooks.WebhookTargetRefused):
            webhooks.register_endpoint(url)
    assert WebhookEndpoint.objects.count() == 0
    endpoint = webhooks.register_endpoint(f"http://127.0.0.1:8000{path}")
    assert endpoint.url == "http://127.0.0.1:8000/dashboard/webhooks/demo-receiver/deliver/"


def _django_check(**environment: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **environment}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        (
            {"DJANGO_DEBUG": "0", "LEPUS_DEMO_WEBHOOK_RECEIVER": "http://127.0.0.1:8000"},
            "LEPUS_DEMO_WEBHOOK_RECEIVER is for the demo: DJANGO_DEBUG is off",
        ),
        (
            {"DJANGO_DEBUG": "1", "LEPUS_DEMO_WEBHOOK_RECEIVER": "http://10.0.0.5:8000"},
            "LEPUS_DEMO_WEBHOOK_RECEIVER must be the demo's loopback origin",
        ),
    ],
)
def test_the_settings_refuse_the_receiver_outside_the_demo(environment: dict[str, Any], message):
    checked = _django_check(**environment)
    assert checked.returncode != 0
    assert message in checked.stderr
