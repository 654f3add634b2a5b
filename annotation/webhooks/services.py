"""Registering, rotating and redelivering webhooks for curators (campaigns named by slug)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404

from annotation.models import Campaign
from common import webhooks
from common.models import WebhookDelivery, WebhookEndpoint


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
