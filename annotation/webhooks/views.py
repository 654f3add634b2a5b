"""Curator pages of webhooks: list and register endpoints (global or per campaign), an endpoint's
delivery log with a redeliver button, and secret rotation; with `LEPUS_DEMO_WEBHOOK_RECEIVER`
(the demo), a receiver that records what it is sent and a page that shows it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from annotation.models import Campaign
from annotation.webhooks.services import (
    campaign_slugs,
    delivery_redeliver,
    demo_receiver_deliveries,
    demo_receiver_endpoints,
    demo_receiver_record,
    endpoint_register,
    endpoint_rotate,
)
from common.forms import form_created
from common.models import WebhookDelivery, WebhookEndpoint
from common.routes import curator_page, route
from common.webhooks import EVENTS, demo_receiver_url


class EndpointForm(forms.Form):
    url = forms.URLField(max_length=500, label="URL", assume_scheme="https")
    campaign = forms.ChoiceField(required=False, help_text="Empty: every campaign.")
    events = forms.MultipleChoiceField(
        choices=[(e, e) for e in EVENTS],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every event.",
    )
    description = forms.CharField(required=False, max_length=200)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        slugs = Campaign.objects.order_by("slug").values_list("slug", flat=True)
        self.fields["campaign"].choices = [("", "All campaigns"), *((s, s) for s in slugs)]  # type: ignore[attr-defined]


def _list(request: HttpRequest, form: EndpointForm, status: int = 200) -> HttpResponse:
    endpoints = list(WebhookEndpoint.objects.all())
    slugs = campaign_slugs({e.campaign_id for e in endpoints if e.campaign_id})
    rows = [(e, slugs.get(e.campaign_id) if e.campaign_id else None) for e in endpoints]
    return render(
        request,
        "annotation/webhooks/list.html",
        {"rows": rows, "form": form, "demo_receiver_url": demo_receiver_url()},
        status=status,
    )


@curator_page("", name="list")
def webhook_list_page(request: HttpRequest) -> HttpResponse:
    return _list(request, EndpointForm())


@curator_page("new/", name="create", methods=("POST",))
def webhook_create_page(request: HttpRequest) -> HttpResponse:
    form = EndpointForm(request.POST)
    endpoint = form_created(
        form,
        lambda: endpoint_register(
            url=form.cleaned_data["url"],
            events=list(form.cleaned_data["events"]),
            campaign_slug=form.cleaned_data["campaign"] or None,
            description=form.cleaned_data["description"],
        ),
        field="url",
    )
    if endpoint is None:
        return _list(request, form, status=400)
    messages.success(request, f"Endpoint registered. Its secret (shown once): {endpoint.secret}")
    return redirect("webhooks:detail", endpoint_id=endpoint.pk)


@curator_page("<int:endpoint_id>/", name="detail")
def webhook_detail_page(request: HttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id)
    deliveries = endpoint.deliveries.select_related("event")[:200]
    return render(
        request,
        "annotation/webhooks/detail.html",
        {"endpoint": endpoint, "deliveries": deliveries},
    )


@curator_page("<int:endpoint_id>/rotate/", name="rotate", methods=("POST",))
def webhook_rotate_page(request: HttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id)
    secret = endpoint_rotate(endpoint)
    messages.success(
        request,
        f"New secret (shown once): {secret}. The old one also signs until the overlap ends.",
    )
    return redirect("webhooks:detail", endpoint_id=endpoint.pk)


@curator_page("deliveries/<int:delivery_id>/redeliver/", name="redeliver", methods=("POST",))
def webhook_redeliver_page(request: HttpRequest, delivery_id: int) -> HttpResponse:
    delivery = get_object_or_404(WebhookDelivery, pk=delivery_id)
    delivery_redeliver(delivery)
    messages.success(request, f"Delivery {delivery.pk} is queued again.")
    return redirect("webhooks:detail", endpoint_id=delivery.endpoint_id)


def _demo_receiver_or_404() -> str:
    url = demo_receiver_url()
    if url is None:
        raise Http404("No demo receiver here (LEPUS_DEMO_WEBHOOK_RECEIVER is not set).")
    return url


@route("demo-receiver/deliver/", name="demo-receiver-deliver")
@csrf_exempt  # Lepus's own worker posts here, signed; there is no session to forge
@require_POST
def demo_receiver_deliver(request: HttpRequest) -> HttpResponse:
    """The demo receiver: records the delivery and answers 200, as a real receiver would."""
    _demo_receiver_or_404()
    record = demo_receiver_record(headers=request.headers, body=request.body)
    return JsonResponse({"received": record["id"], "signature_valid": record["signature_valid"]})


@curator_page("demo-receiver/", name="demo-receiver")
def demo_receiver_page(request: HttpRequest) -> HttpResponse:
    url = _demo_receiver_or_404()
    return render(
        request,
        "annotation/webhooks/demo_receiver.html",
        {
            "receiver_url": url,
            "endpoints": demo_receiver_endpoints(),
            "deliveries": demo_receiver_deliveries(),
            "events": EVENTS,
        },
    )
