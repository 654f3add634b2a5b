"""Signed webhooks: a transactional outbox, HMAC-SHA256 signatures and delivery by Celery.

`emit(event, data, campaign_id=None)` writes a `WebhookEvent` and one `WebhookDelivery` per
matching endpoint in the caller's transaction, and publishes the delivery tasks only once that
transaction commits (an event rolled back with its cause is never sent). Delivery happens in a worker
(`common.tasks.webhook_deliver`), never in the web request, with exponential backoff up to
`LEPUS_WEBHOOK_MAX_ATTEMPTS`. The header format is documented in docs/webhooks.md.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import requests
import requests.adapters
import urllib3
import urllib3.connection
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from common.broker import publish_now, task_named
from common.models import (
    WebhookDelivery,
    WebhookDeliveryStatus,
    WebhookEndpoint,
    WebhookEvent,
)

EVENTS = (
    "candidate.finalised",
    "review_item.resolved",
    "worker.excluded",
    "participant.erased",
    "release.built",
    "training_run.finished",
    "training_run.failed",
)
SIGNATURE_HEADER = "Lepus-Signature"
TIMESTAMP_HEADER = "Lepus-Timestamp"
ID_HEADER = "Lepus-Webhook-Id"
EVENT_HEADER = "Lepus-Event"
# The demo's own receiver (`annotation.webhooks.views.demo_receiver_deliver`), at this path of the
# origin `LEPUS_DEMO_WEBHOOK_RECEIVER` names.
DEMO_RECEIVER_PATH = "/dashboard/webhooks/demo-receiver/deliver/"


class WebhookTargetRefused(ValueError):
    """The URL points at an address that is not globally routable (`is_public_address`)."""


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of `<timestamp>.<body>` under `secret`."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(endpoint: WebhookEndpoint, timestamp: int, body: bytes) -> str:
    """`v1=<hex>`, followed by `,v1=<hex>` under the previous secret while its overlap lasts."""
    parts = [f"v1={sign(endpoint.secret, timestamp, body)}"]
    if endpoint.previous_secret and (
        endpoint.previous_secret_expires_at and endpoint.previous_secret_expires_at > timezone.now()
    ):
        parts.append(f"v1={sign(endpoint.previous_secret, timestamp, body)}")
    return ",".join(parts)


def verify(secret: str, header: str, timestamp: str, body: bytes, *, tolerance: int = 300) -> bool:
    """The receiver's check (the docs' snippet does the same): fresh timestamp, one matching v1."""
    try:
        stamp = int(timestamp)
    except ValueError:
        return False
    if abs(time.time() - stamp) > tolerance:
        return False
    expected = sign(secret, stamp, body)
    return any(
        hmac.compare_digest(expected, part.strip()[3:])
        for part in header.split(",")
        if part.strip().startswith("v1=")
    )


def rotate_secret(endpoint: WebhookEndpoint, *, overlap_seconds: float | None = None) -> str:
    """Give `endpoint` a new secret; the old one keeps signing (second signature) for the overlap."""
    overlap = settings.LEPUS_WEBHOOK_SECRET_OVERLAP if overlap_seconds is None else overlap_seconds
    endpoint.previous_secret = endpoint.secret
    endpoint.previous_secret_expires_at = timezone.now() + timedelta(seconds=overlap)
    endpoint.secret = new_secret()
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
    return endpoint.secret


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a 6to4 or Teredo address carries (a relay delivers to them)."""
    embedded = [ip.sixtofour] if ip.sixtofour is not None else []
    if ip.teredo is not None:
        embedded.extend(ip.teredo)  # (server, client)
    return embedded


def is_public_address(address: str) -> bool:
    """Whether a webhook may be sent to `address`: globally routable by the standard library's own
    properties, not by a list of ranges kept here. `is_global` (which already leaves out private,
    shared 100.64.0.0/10, loopback, link-local, documentation and benchmark space) and neither
    multicast nor reserved (which `is_global` lets through in places); an IPv4-mapped address is
    judged as the IPv4 address it is, and a 6to4 or Teredo address only passes when the IPv4
    addresses it embeds pass too (2002:7f00:1:: is 127.0.0.1 through a 6to4 relay)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    judged: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        judged.extend(_embedded_ipv4(ip))
    return all(one.is_global and not one.is_multicast and not one.is_reserved for one in judged)


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to. With `LEPUS_WEBHOOK_RESOLVE=offline` only IP literals
    and localhost resolve, and no query is sent for any other name (it is refused)."""
    if settings.LEPUS_WEBHOOK_RESOLVE == "offline":
        try:
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            pass
        if host == "localhost" or host.endswith(".localhost"):
            return ["127.0.0.1"]
        raise WebhookTargetRefused(f"cannot resolve {host}: names are not resolved offline")
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as error:
        raise WebhookTargetRefused(f"cannot resolve {host}: {error}") from error
    return [str(info[4][0]) for info in infos]


def demo_receiver_url() -> str | None:
    """The demo receiver's URL, or None when `LEPUS_DEMO_WEBHOOK_RECEIVER` is not set."""
    origin = settings.LEPUS_DEMO_WEBHOOK_RECEIVER
    return f"{origin}{DEMO_RECEIVER_PATH}" if origin else None


def is_demo_receiver(url: str) -> bool:
    """Whether `url` is exactly the demo receiver (the one loopback target the demo allows:
    its origin is a loopback literal or localhost, fixed by the demo's settings, never by a
    curator; any other port, path or query on loopback is refused as ever)."""
    expected = demo_receiver_url()
    return expected is not None and url == expected


def check_target(url: str) -> None:
    """Raise `WebhookTargetRefused` unless every address `url`'s host resolves to is public
    (`is_public_address`), or `url` is the demo receiver."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookTargetRefused(f"not an http(s) URL: {url}")
    if is_demo_receiver(url):
        return
    offline = settings.LEPUS_WEBHOOK_RESOLVE == "offline"
    if settings.LEPUS_WEBHOOK_ALLOW_PRIVATE and not offline:
        return
    # Offline, a name is refused even where private targets are allowed: otherwise the POST
    # itself would resolve it.
    addresses = resolve(parts.hostname, parts.port or 443)
    if settings.LEPUS_WEBHOOK_ALLOW_PRIVATE:
        return
    if not all(is_public_address(address) for address in addresses):
        raise WebhookTargetRefused(f"{parts.hostname} resolves to a non-public address")


def register_endpoint(
    url: str,
    *,
    events: list[str] | None = None,
    campaign_id: int | None = None,
    description: str = "",
) -> WebhookEndpoint:
    check_target(url)
    unknown = sorted(set(events or []) - set(EVENTS))
    if unknown:
        raise ValueError(f"unknown events: {', '.join(unknown)}")
    return WebhookEndpoint.objects.create(
        url=url,
        events=list(events or []),
        campaign_id=campaign_id,
        description=description,
        secret=new_secret(),
    )


def _listening(event: str, ids: list[int]) -> list[WebhookEndpoint]:
    if event not in EVENTS:
        raise ValueError(f"unknown webhook event {event!r}")
    scope = Q(campaign_id__isnull=True) | Q(campaign_id__in=ids)
    return [
        e
        for e in WebhookEndpoint.objects.filter(scope, active=True)
        if not e.events or event in e.events
    ]


def _campaign_ids(campaign_id: int | Sequence[int] | None) -> list[int]:
    return [campaign_id] if isinstance(campaign_id, int) else list(campaign_id or [])


def listened(event: str, campaign_id: int | Sequence[int] | None = None) -> bool:
    """Whether an active endpoint would receive `event` (lets callers skip building payloads)."""
    return bool(_listening(event, _campaign_ids(campaign_id)))


def emit(
    event: str, data: dict[str, Any], campaign_id: int | Sequence[int] | None = None
) -> WebhookEvent | None:
    """Record `event` in the caller's transaction; deliveries are published after commit.

    Returns None (and writes nothing) when no active endpoint listens, so emitting is cheap.
    `campaign_id` may be several ids (a release of several campaigns): endpoints of any of them
    get the event once.
    """
    records = emit_many(event, [data], campaign_id)
    return records[0] if records else None


def emit_many(
    event: str, payloads: Sequence[dict[str, Any]], campaign_id: int | Sequence[int] | None = None
) -> list[WebhookEvent]:
    """`emit` for many events of one kind and scope: one endpoint query and two bulk INSERTs
    (aggregation finalises thousands of candidates in one statement)."""
    ids = _campaign_ids(campaign_id)
    endpoints = _listening(event, ids)
    if not endpoints or not payloads:
        return []
    records = WebhookEvent.objects.bulk_create(
        [
            WebhookEvent(
                id=uuid.uuid4(),
                event=event,
                campaign_id=ids[0] if len(ids) == 1 else None,
                data=data,
            )
            for data in payloads
        ]
    )
    deliveries = WebhookDelivery.objects.bulk_create(
        [
            WebhookDelivery(event=record, endpoint=e, next_attempt_at=timezone.now())
            for record in records
            for e in endpoints
        ]
    )
    delivery_ids = [d.pk for d in deliveries]
    transaction.on_commit(lambda: _publish(delivery_ids))
    return records


def _publish(delivery_ids: list[int]) -> None:
    for delivery_id in delivery_ids:
        publish_now(task_named("common.tasks.webhook_deliver"), delivery_id)


def redeliver(delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery again (a curator's button): back to pending with a fresh attempt budget."""
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=WebhookDeliveryStatus.PENDING, attempts=0, next_attempt_at=timezone.now()
    )
    transaction.on_commit(lambda: _publish([delivery.pk]))
    delivery.refresh_from_db()
    return delivery


def body_for(event: WebhookEvent) -> bytes:
    payload = {
        "id": str(event.id),
        "event": event.event,
        "timestamp": event.created_at.isoformat(),
        "data": event.data,
    }
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class Attempt:
    ok: bool
    response_code: int | None
    duration_ms: int
    error: str


def _refuse_private_peer(sock: socket.socket) -> None:
    """After connecting, before a byte is sent: the address actually connected to must be
    public. The name was checked when resolved (`check_target`), but the HTTP client resolves it
    again, and a DNS answer that changes in between (DNS rebinding: public first, then
    127.0.0.1) would otherwise reach an internal service."""
    if settings.LEPUS_WEBHOOK_ALLOW_PRIVATE:
        return
    address = str(sock.getpeername()[0])
    if not is_public_address(address):
        sock.close()
        raise WebhookTargetRefused(f"connected to a non-public address {address}; not sent")


class _PublicPeer:
    """Mixed into urllib3's connection classes: each new socket passes `_refuse_private_peer`."""

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        _refuse_private_peer(sock)
        return sock


class _PublicHTTPConnection(_PublicPeer, urllib3.connection.HTTPConnection):
    pass


class _PublicHTTPSConnection(_PublicPeer, urllib3.connection.HTTPSConnection):
    pass


class _PublicHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _PublicHTTPConnection


class _PublicHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _PublicHTTPSConnection


class _PublicOnlyAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose connections check the address they reached (above)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _PublicHTTPPool,
            "https": _PublicHTTPSPool,
        }


def _session(*, demo_receiver: bool = False) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # no proxy from the environment: the peer checked is the target
    # The demo receiver's origin is loopback by its settings' check; every other target goes
    # through the adapter that refuses a non-public peer.
    adapter = requests.adapters.HTTPAdapter() if demo_receiver else _PublicOnlyAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def post(endpoint: WebhookEndpoint, event: WebhookEvent) -> Attempt:
    """One signed POST; redirects are not followed (a 3xx is a failure), targets re-checked when
    resolved and again at the address connected to."""
    body = body_for(event)
    stamp = int(time.time())
    started = time.monotonic()
    try:
        check_target(endpoint.url)
        with _session(demo_receiver=is_demo_receiver(endpoint.url)) as session:
            response = session.post(
                endpoint.url,
                data=body,
                headers={
                    "Content-Type": "application/json",
                    "User-Agent": "Lepus-Webhooks/1",
                    ID_HEADER: str(event.id),
                    EVENT_HEADER: event.event,
                    TIMESTAMP_HEADER: str(stamp),
                    SIGNATURE_HEADER: signature_header(endpoint, stamp, body),
                },
                timeout=settings.LEPUS_WEBHOOK_TIMEOUT,
                allow_redirects=False,
            )
    except (requests.RequestException, WebhookTargetRefused) as error:
        elapsed = int((time.monotonic() - started) * 1000)
        return Attempt(False, None, elapsed, f"{type(error).__name__}: {error}"[:500])
    elapsed = int((time.monotonic() - started) * 1000)
    ok = 200 <= response.status_code < 300
    return Attempt(ok, response.status_code, elapsed, "" if ok else f"HTTP {response.status_code}")


def backoff_seconds(attempts: int) -> float:
    return float(settings.LEPUS_WEBHOOK_BACKOFF) * (2 ** max(attempts - 1, 0))


def deliver(delivery_id: int) -> float | None:
    """Attempt one delivery under a row lock; return the retry delay, or None when done.

    A delivery that already succeeded is never sent again (the lock makes concurrent tasks wait
    and then see it succeeded).
    """
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update()
            .select_related("event", "endpoint")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None or delivery.status != WebhookDeliveryStatus.PENDING:
            return None
        if not delivery.endpoint.active:
            delivery.status = WebhookDeliveryStatus.FAILED
            delivery.last_error = "endpoint disabled"
            delivery.save(update_fields=["status", "last_error", "updated_at"])
            return None
        attempt = post(delivery.endpoint, delivery.event)
        delivery.attempts += 1
        delivery.response_code = attempt.response_code
        delivery.duration_ms = attempt.duration_ms
        delivery.last_error = attempt.error
        delay: float | None = None
        if attempt.ok:
            delivery.status = WebhookDeliveryStatus.SUCCEEDED
            delivery.delivered_at = timezone.now()
            delivery.next_attempt_at = None
        elif delivery.attempts >= settings.LEPUS_WEBHOOK_MAX_ATTEMPTS:
            delivery.status = WebhookDeliveryStatus.FAILED
            delivery.next_attempt_at = None
        else:
            delay = backoff_seconds(delivery.attempts)
            delivery.next_attempt_at = timezone.now() + timedelta(seconds=delay)
        delivery.save()
        return delay


def due_pending_ids(*, now: Any = None) -> list[int]:
    """Pending deliveries whose next attempt is overdue (lost publishes; the periodic sweep)."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=60)
    return list(
        WebhookDelivery.objects.filter(
            status=WebhookDeliveryStatus.PENDING, next_attempt_at__lt=cutoff
        ).values_list("pk", flat=True)[:1000]
    )
