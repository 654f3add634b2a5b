"""`manage.py webhooks list|add|rotate|deliveries|redeliver [--json]`: signed webhooks for scripts
(docs/webhooks.md)."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from annotation.webhooks.services import (
    campaign_slugs,
    delivery_redeliver,
    endpoint_register,
    endpoint_rotate,
)
from common.management.arguments import command_errors
from common.management.declared import Arg, DeclaredCommand, Subcommands, flag
from common.models import WebhookDelivery, WebhookEndpoint
from common.webhooks import EVENTS


def _endpoint(endpoint: WebhookEndpoint, slug: str | None) -> dict[str, Any]:
    return {
        "id": endpoint.pk,
        "url": endpoint.url,
        "campaign": slug,
        "events": endpoint.events,
        "active": endpoint.active,
        "description": endpoint.description,
    }


def _delivery(delivery: WebhookDelivery) -> dict[str, Any]:
    return {
        "id": delivery.pk,
        "event": delivery.event.event,
        "event_id": str(delivery.event_id),
        "status": delivery.status,
        "attempts": delivery.attempts,
        "response_code": delivery.response_code,
        "duration_ms": delivery.duration_ms,
        "last_error": delivery.last_error,
    }


class Command(DeclaredCommand):
    """List, register, rotate and inspect signed webhook endpoints."""

    # Not a LepusCommand: its --json prints indented JSON, a list for `list` and `deliveries`.
    arguments = (
        flag("--json", help="Print JSON."),
        Subcommands(
            dest="action",
            commands={
                "list": (),
                "add": (
                    Arg("url"),
                    Arg("--campaign", default=None, help="Campaign slug; default: all campaigns."),
                    Arg("--event", action="append", default=[], choices=EVENTS),
                    Arg("--description", default=""),
                ),
                "rotate": (Arg("endpoint_id", type=int),),
                "deliveries": (Arg("endpoint_id", type=int),),
                "redeliver": (Arg("delivery_id", type=int),),
            },
        ),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        result = self._run(options)
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2, default=str))
        else:
            for row in result if isinstance(result, list) else [result]:
                self.stdout.write(" ".join(f"{k}={v}" for k, v in row.items()))

    def _run(self, options: dict[str, Any]) -> Any:
        action = options["action"]
        if action == "list":
            endpoints = list(WebhookEndpoint.objects.all())
            slugs = campaign_slugs({e.campaign_id for e in endpoints if e.campaign_id})
            return [_endpoint(e, slugs.get(e.campaign_id or 0)) for e in endpoints]
        if action == "add":
            with command_errors(ValidationError):
                endpoint = endpoint_register(
                    url=options["url"],
                    events=options["event"],
                    campaign_slug=options["campaign"],
                    description=options["description"],
                )
            return {**_endpoint(endpoint, options["campaign"]), "secret": endpoint.secret}
        if action == "rotate":
            endpoint = self._get(WebhookEndpoint, options["endpoint_id"])
            return {"id": endpoint.pk, "secret": endpoint_rotate(endpoint)}
        if action == "deliveries":
            endpoint = self._get(WebhookEndpoint, options["endpoint_id"])
            return [_delivery(d) for d in endpoint.deliveries.select_related("event")[:200]]
        delivery = self._get(WebhookDelivery, options["delivery_id"])
        return _delivery(delivery_redeliver(delivery))

    @staticmethod
    def _get(model: Any, pk: int) -> Any:
        found = model.objects.filter(pk=pk).first()
        if found is None:
            raise CommandError(f"no {model.__name__} {pk}")
        return found
