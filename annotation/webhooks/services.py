"""Registering, rotating and redelivering webhooks for curators (campaigns named by slug), and
the demo's receiver."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from annotation.models import Campaign
from common import webhooks
from common.models import WebhookDelivery, WebhookEndpoint
from common.parsers import JSONInvalid, json_parse


def endpoint_register(
    *, url: str, events: list[str], campaign_slug: str | None, description: str = ""
) -> WebhookEndpoint:
    campaign_id = None
    if campaign_slug:
        campaign = Campaign.objects.filter(slug=campaign_slug).first()
        if campaign is None:
            raise ValidationError(f"no campaign {campaign_slug!r}")
        campaign_id = campaign.pk
    try:
        return webhooks.register_endpoint(
            url, events=events, campaign_id=campaign_id, description=description
        )
    except ValueError as error:  # WebhookTargetRefused is a ValueError too
        raise ValidationError(str(error)) from error


def endpoint_rotate(endpoint: WebhookEndpoint) -> str:
    """Rotate under the row lock: an endpoint deleted meanwhile (a concurrent DELETE) is a 404,
    not a failed save."""
    with transaction.atomic():
        locked = WebhookEndpoint.objects.select_for_update().filter(pk=endpoint.pk).first()
        if locked is None:
            raise Http404("No such webhook endpoint.")
        return webhooks.rotate_secret(locked)


def delivery_redeliver(delivery: WebhookDelivery) -> WebhookDelivery:
    with transaction.atomic():
        return webhooks.redeliver(delivery)


def campaign_slugs(ids: set[int]) -> dict[int, str]:
    return dict(Campaign.objects.filter(pk__in=ids).values_list("pk", "slug"))


# --- The demo's receiver (LEPUS_DEMO_WEBHOOK_RECEIVER; docs/webhooks.md) -----------------------

DEMO_RECEIVER_FILE = "demo-webhook-receiver.jsonl"
DEMO_RECEIVER_SHOWN = 50


def _demo_receiver_file() -> Path:
    return Path(settings.VAR_DIR) / DEMO_RECEIVER_FILE


def demo_receiver_endpoints() -> list[WebhookEndpoint]:
    """The endpoints registered at the demo receiver's URL (none when it is off)."""
    url = webhooks.demo_receiver_url()
    return list(WebhookEndpoint.objects.filter(url=url)) if url else []


def demo_receiver_record(*, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """Record one delivery as the demo receiver got it, with whether its signature verifies
    under a secret of an endpoint registered at the receiver (as a real receiver would check).
    One JSON line appended to a file under the var directory: shared by every web process,
    nothing in the database."""
    signature = headers.get(webhooks.SIGNATURE_HEADER, "")
    timestamp = headers.get(webhooks.TIMESTAMP_HEADER, "")
    secrets = [
        secret
        for endpoint in demo_receiver_endpoints()
        for secret in (endpoint.secret, endpoint.previous_secret)
        if secret
    ]
    try:
        payload: Any = json_parse(body)
    except JSONInvalid:  # recorded as text, as a real receiver would log what it could not read
        payload = body.decode("utf-8", "replace")[:2000]
    record = {
        "received_at": timezone.now().isoformat(timespec="seconds"),
        "id": headers.get(webhooks.ID_HEADER, ""),
        "event": headers.get(webhooks.EVENT_HEADER, ""),
        "signature_valid": any(
            webhooks.verify(secret, signature, timestamp, body) for secret in secrets
        ),
        "payload": payload,
    }
    with _demo_receiver_file().open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
    return record


def demo_receiver_deliveries(*, limit: int = DEMO_RECEIVER_SHOWN) -> list[dict[str, Any]]:
    """The last `limit` deliveries the demo receiver recorded, newest first."""
    path = _demo_receiver_file()
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()[-limit:]
    records = []
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:  # a line cut short by a crash mid-write
            continue
        record["body"] = json.dumps(record["payload"], indent=2, sort_keys=True)
        records.append(record)
    return records
