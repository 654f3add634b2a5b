"""Signed webhooks end to end: a real HTTP receiver on loopback and a real Celery worker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.db import transaction

from common import webhooks
from common.models import WebhookDelivery, WebhookDeliveryStatus, WebhookEndpoint
from tests.support.processes import CeleryWorker, purge_broker, wait_until


class Receiver:
    """A loopback HTTP server whose behaviour each test scripts: answer codes, sleeps, down."""

    def __init__(self, port: int = 0) -> None:
        self.received: list[dict[str, Any]] = []
        self.script: list[int | str] = []  # per request: a status code or "sleep"
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    action = receiver.script.pop(0) if receiver.script else 200
                if action == "sleep":
                    time.sleep(3)
                    return
                if action == 200:
                    with receiver.lock:
                        receiver.received.append({"headers": dict(self.headers), "body": body})
                self.send_response(int(action))
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def webhook_worker(transactional_db, settings) -> Iterator[CeleryWorker]:  # type: ignore[no-untyped-def]
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    purge_broker()
    worker = CeleryWorker(
        extra_env={
            "LEPUS_WEBHOOK_ALLOW_PRIVATE": "true",
            "LEPUS_WEBHOOK_BACKOFF": "0.3",
            "LEPUS_WEBHOOK_TIMEOUT": "1",
            "LEPUS_WEBHOOK_MAX_ATTEMPTS": "6",
        }
    ).start()
    try:
        yield worker
    finally:
        worker.stop()


def _emit(event: str, data: dict[str, Any], campaign_id: int | None = None) -> None:
    with transaction.atomic():
        webhooks.emit(event, data, campaign_id=campaign_id)


def _settled(count: int) -> bool:
    return (
        WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.PENDING).count() == 0
        and WebhookDelivery.objects.count() == count
    )


def test_deliveries_are_signed_and_verify(receiver: Receiver, webhook_worker: CeleryWorker) -> None:
    endpoint = webhooks.register_endpoint(receiver.url, events=["release.built"])
    _emit("release.built", {"release_id": 7, "name": "v1"}, campaign_id=3)
    _emit("worker.excluded", {"worker_id": 1})  # not subscribed: nothing sent
    wait_until(lambda: _settled(1), timeout=30, message="delivered")
    assert len(receiver.received) == 1
    got = receiver.received[0]
    body = got["body"]
    payload = json.loads(body)
    assert payload["event"] == "release.built"
    assert payload["data"] == {"release_id": 7, "name": "v1"}
    assert set(payload) == {"id", "event", "timestamp", "data"}
    assert webhooks.verify(
        endpoint.secret, got["headers"]["Lepus-Signature"], got["headers"]["Lepus-Timestamp"], body
    )
    assert not webhooks.verify(
        "whsec_wrong", got["headers"]["Lepus-Signature"], got["headers"]["Lepus-Timestamp"], body
    )
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDeliveryStatus.SUCCEEDED
    assert delivery.response_code == 200 and delivery.attempts == 1
    assert delivery.duration_ms is not None


def test_retries_on_500_and_timeout_and_never_twice(
    receiver: Receiver, webhook_worker: CeleryWorker
) -> None:
    webhooks.register_endpoint(receiver.url)
    receiver.script = [500, "sleep", 503]
    _emit("candidate.finalised", {"candidate_id": 11})
    wait_until(lambda: _settled(1), timeout=60, message="delivered after retries")
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDeliveryStatus.SUCCEEDED
    assert delivery.attempts == 4
    time.sleep(2)  # a stray retry would arrive within this
    assert len(receiver.received) == 1


def test_receiver_down_for_a_while_gets_everything_once(webhook_worker: CeleryWorker) -> None:
    first = Receiver()
    port = first.server.server_address[1]
    url = first.url
    first.close()  # down: connections are refused
    webhooks.register_endpoint(url)
    for i in range(5):
        _emit("review_item.resolved", {"item": i})
    wait_until(
        lambda: WebhookDelivery.objects.filter(attempts__gte=2).count() == 5,
        timeout=30,
        message="failed attempts while down",
    )
    back = Receiver(port)
    try:
        wait_until(lambda: _settled(5), timeout=60, message="all delivered once back")
        time.sleep(1)
        items = sorted(json.loads(r["body"])["data"]["item"] for r in back.received)
        assert items == [0, 1, 2, 3, 4]
        assert WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.SUCCEEDED).count() == 5
    finally:
        back.close()


@pytest.mark.django_db
def test_private_targets_refused(settings) -> None:  # type: ignore[no-untyped-def]
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    for url in (
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://192.168.0.5/hook",
        "ftp://example.org/hook",
    ):
        with pytest.raises(webhooks.WebhookTargetRefused):
            webhooks.register_endpoint(url)
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.django_db
def test_redirect_is_not_followed(receiver: Receiver, settings) -> None:  # type: ignore[no-untyped-def]
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    endpoint = webhooks.register_endpoint(receiver.url)
    receiver.script = [302]
    event = webhooks.emit("release.built", {"release_id": 1})
    assert event is not None
    delivery = WebhookDelivery.objects.get()
    delay = webhooks.deliver(delivery.pk)
    delivery.refresh_from_db()
    assert delay is not None and delivery.response_code == 302
    assert delivery.status == WebhookDeliveryStatus.PENDING and receiver.received == []
    assert endpoint.deliveries.count() == 1


@pytest.mark.django_db
def test_rotation_sends_both_signatures_during_overlap(settings) -> None:  # type: ignore[no-untyped-def]
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    endpoint = webhooks.register_endpoint("http://127.0.0.1:9/hook")
    old = endpoint.secret
    new = webhooks.rotate_secret(endpoint, overlap_seconds=60)
    stamp = int(time.time())
    header = webhooks.signature_header(endpoint, stamp, b"{}")
    assert webhooks.verify(old, header, str(stamp), b"{}")
    assert webhooks.verify(new, header, str(stamp), b"{}")
    webhooks.rotate_secret(endpoint, overlap_seconds=-1)  # overlap over: only the newest signs
    header = webhooks.signature_header(endpoint, stamp, b"{}")
    assert not webhooks.verify(new, header, str(stamp), b"{}")
    assert webhooks.verify(endpoint.secret, header, str(stamp), b"{}")


@pytest.mark.django_db
def test_rolled_back_event_is_never_sent(settings) -> None:  # type: ignore[no-untyped-def]
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    webhooks.register_endpoint("http://127.0.0.1:9/hook")
    with pytest.raises(RuntimeError), transaction.atomic():
        webhooks.emit("release.built", {"release_id": 1})
        raise RuntimeError("the cause failed")
    assert WebhookDelivery.objects.count() == 0


@pytest.mark.django_db
def test_emit_many_records_one_event_per_payload_with_one_endpoint_lookup(
    settings, django_assert_num_queries
) -> None:  # type: ignore[no-untyped-def]
    from common.models import WebhookEvent

    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    first = webhooks.register_endpoint("http://127.0.0.1:9/a", events=["worker.excluded"])
    second = webhooks.register_endpoint("http://127.0.0.1:9/b", campaign_id=None)
    webhooks.register_endpoint("http://127.0.0.1:9/c", events=["release.built"])  # not listening
    payloads = [{"participation_id": index} for index in range(3)]
    # One endpoint lookup and two bulk inserts, however many payloads (a QC run excludes hundreds).
    with transaction.atomic(), django_assert_num_queries(3):
        records = webhooks.emit_many("worker.excluded", payloads, 5)
    assert [record.data for record in records] == payloads
    events = WebhookEvent.objects.all()
    assert events.count() == 3 and {event.campaign_id for event in events} == {5}
    for record in records:
        endpoints = set(
            WebhookDelivery.objects.filter(event=record).values_list("endpoint", flat=True)
        )
        assert endpoints == {first.pk, second.pk}
    WebhookEndpoint.objects.all().delete()
    assert webhooks.emit_many("worker.excluded", payloads, 5) == []
    assert webhooks.emit_many("worker.excluded", [], 5) == []


@pytest.mark.django_db
def test_command_and_api(settings, curator) -> None:  # type: ignore[no-untyped-def]
    from io import StringIO

    from django.core.management import call_command
    from django.test import Client

    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    out = StringIO()
    call_command(
        "webhooks",
        "--json",
        "add",
        "http://127.0.0.1:9/hook",
        "--event",
        "release.built",
        stdout=out,
    )
    added = json.loads(out.getvalue())
    assert added["events"] == ["release.built"] and added["secret"].startswith("whsec_")
    out = StringIO()
    call_command("webhooks", "--json", "list", stdout=out)
    assert [row["id"] for row in json.loads(out.getvalue())] == [added["id"]]

    client = Client()
    client.force_login(curator)
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    refused = client.post(
        "/api/v1/webhooks/", {"url": "http://10.0.0.1/hook"}, content_type="application/json"
    )
    assert refused.status_code == 400
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    webhooks.emit("release.built", {"release_id": 3})
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=WebhookDeliveryStatus.FAILED)
    answer = client.post(f"/api/v1/webhooks/deliveries/{delivery.pk}/redeliver/")
    assert answer.status_code == 202 and answer.json()["status"] == "pending"
    log = client.get(f"/api/v1/webhooks/{added['id']}/deliveries/")
    assert [row["id"] for row in log.json()] == [delivery.pk]
    page = client.get(f"/dashboard/webhooks/{added['id']}/")
    assert page.status_code == 200 and b"release.built" in page.content
    rotated = client.post(f"/api/v1/webhooks/{added['id']}/rotate/")
    assert rotated.json()["secret"] != added["secret"]


def test_candidate_finalised_is_sent_once_per_candidate_that_becomes_final(
    receiver: Receiver, webhook_worker: CeleryWorker
) -> None:
    """Aggregation's set-based UPDATE reports the rows it finalised: one event each, and a
    recompute that finalises nothing new sends nothing."""
    from annotation.quality.aggregation import aggregation_recompute
    from tests.annotation.quality.factories import (
        quality_crowd_campaign,
        quality_judge,
        quality_worker,
    )

    campaign = quality_crowd_campaign(slug="finals", clips=1, candidates_per_clip=3, quota=2)
    endpoint = webhooks.register_endpoint(
        receiver.url, events=["candidate.finalised"], campaign_id=campaign.pk
    )
    webhooks.register_endpoint(receiver.url, campaign_id=campaign.pk + 1)  # another campaign
    first, second, third = campaign.items.order_by("id")
    workers = [quality_worker(campaign, f"finals-{index}") for index in range(2)]
    ratings = {"descriptiveness": 4, "relevance": 3, "fluency": 4}
    for worker in workers:
        quality_judge(worker, first, ratings)
        quality_judge(worker, second, ratings)
    quality_judge(workers[0], third, ratings)  # one of two: not final yet

    aggregation_recompute(campaign=campaign)
    aggregation_recompute(campaign=campaign)  # nothing new: no event
    wait_until(lambda: _settled(2), timeout=30, message="two deliveries")
    sent = sorted(json.loads(r["body"])["data"]["campaign_candidate_id"] for r in receiver.received)
    assert sent == [first.pk, second.pk]

    quality_judge(workers[1], third, ratings)
    aggregation_recompute(campaign=campaign)
    wait_until(lambda: _settled(3), timeout=30, message="the third delivery")
    time.sleep(1)  # a duplicate would arrive within this
    payloads = [json.loads(r["body"]) for r in receiver.received]
    assert [p["data"]["campaign_candidate_id"] for p in payloads] == [first.pk, second.pk, third.pk]
    assert payloads[2]["data"] == {
        "campaign_candidate_id": third.pk,
        "candidate_id": third.candidate_id,
        "overall": pytest.approx(11 / 3),
        "training_class": 4,
    }
    assert all(r["headers"]["Lepus-Event"] == "candidate.finalised" for r in receiver.received)
    assert {d.endpoint_id for d in WebhookDelivery.objects.all()} == {endpoint.pk}


@pytest.mark.django_db
def test_offline_resolution_sends_no_dns_query(settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The suite resolves offline: a name is refused without a query, private or not; IP literals
    and localhost still get the address check."""
    import socket

    assert settings.LEPUS_WEBHOOK_RESOLVE == "offline"
    queries: list[str] = []

    def recording(host: str, *args: Any, **kwargs: Any) -> Any:
        queries.append(host)
        raise AssertionError("getaddrinfo called")

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    for allow_private in (False, True):
        settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = allow_private
        for url in ("https://hooks.example.org/lepus", "http://xn--nxasmq6b.com/h", "http://a.b/"):
            with pytest.raises(webhooks.WebhookTargetRefused, match="not resolved offline"):
                webhooks.register_endpoint(url)
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    for url in ("http://localhost:8000/h", "http://127.0.0.1/h", "http://[::ffff:10.0.0.1]/h"):
        with pytest.raises(webhooks.WebhookTargetRefused, match="non-public"):
            webhooks.register_endpoint(url)
    public = webhooks.register_endpoint("https://93.184.215.14/hook")
    assert WebhookEndpoint.objects.get().pk == public.pk
    assert queries == []


@pytest.mark.django_db
def test_dns_resolution_refuses_names_that_resolve_privately(settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Production resolves with the system resolver (stubbed here: no query leaves the test)
    and refuses a name if any of its addresses is private."""
    import socket

    settings.LEPUS_WEBHOOK_RESOLVE = "dns"
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    answers = {
        "public.test": ["93.184.215.14"],
        "sneaky.test": ["93.184.215.14", "10.0.0.7"],
        "metadata.test": ["169.254.169.254"],
    }

    def stub(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "unknown")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", stub)
    assert webhooks.register_endpoint("https://public.test/hook").url == "https://public.test/hook"
    for url in ("https://sneaky.test/h", "http://metadata.test/h"):
        with pytest.raises(webhooks.WebhookTargetRefused, match="non-public"):
            webhooks.register_endpoint(url)
    with pytest.raises(webhooks.WebhookTargetRefused, match="cannot resolve"):
        webhooks.register_endpoint("https://nowhere.test/h")
    assert WebhookEndpoint.objects.count() == 1


def test_the_test_process_sends_no_dns_query_for_outside_names() -> None:
    """tests/conftest.py's guard: any external name fails at once, as with no network."""
    import socket

    with pytest.raises(socket.gaierror, match="no DNS in tests"):
        socket.getaddrinfo("example.org", 443)
    assert socket.getaddrinfo("127.0.0.1", 80)[0][4][0] == "127.0.0.1"
    assert socket.getaddrinfo("localhost", 80)


@pytest.mark.django_db
def test_rotating_an_endpoint_deleted_meanwhile_is_a_404_not_a_500(settings, curator) -> None:  # type: ignore[no-untyped-def]
    """The schema fuzzer's two workers once deleted and rotated the same endpoint at once."""
    from django.http import Http404
    from django.test import Client

    from annotation.webhooks.services import endpoint_rotate

    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    endpoint = webhooks.register_endpoint("http://127.0.0.1:9/hook")
    stale = WebhookEndpoint.objects.get(pk=endpoint.pk)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).delete()
    with pytest.raises(Http404):
        endpoint_rotate(stale)
    client = Client()
    client.force_login(curator)
    assert client.post(f"/api/v1/webhooks/{endpoint.pk}/rotate/").status_code == 404


@pytest.mark.django_db
def test_a_name_that_resolves_elsewhere_at_send_time_is_not_sent_to(  # type: ignore[no-untyped-def]
    receiver: Receiver, settings, monkeypatch
) -> None:
    """DNS rebinding: the name is public when checked and points at loopback when the HTTP client
    resolves it again. The connection's own peer address is checked before anything is sent, so
    the internal receiver gets nothing and the attempt fails with the reason."""
    import socket

    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = False
    settings.LEPUS_WEBHOOK_RESOLVE = "dns"
    port = receiver.server.server_address[1]
    real_getaddrinfo = socket.getaddrinfo

    def rebinding(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host == "hooks.rebind.example":  # the client's own resolution: loopback
            return real_getaddrinfo("127.0.0.1", *args, **kwargs)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(webhooks, "resolve", lambda host, port: ["93.184.215.14"])  # checked
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    endpoint = webhooks.register_endpoint(f"http://hooks.rebind.example:{port}/hook")
    event = webhooks.emit("release.built", {"release_id": 1})
    assert event is not None
    attempt = webhooks.post(endpoint, event)
    assert not attempt.ok and attempt.response_code is None
    assert "non-public address 127.0.0.1" in attempt.error
    assert receiver.received == []
    # The same receiver, allowed as a private target, does get it: the check is what stopped it.
    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    assert webhooks.post(endpoint, event).ok
    assert len(receiver.received) == 1
