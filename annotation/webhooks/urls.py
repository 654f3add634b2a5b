"""Webhook pages, mounted under /dashboard/webhooks/."""

from __future__ import annotations

from django.urls import path

from annotation.webhooks import views

app_name = "webhooks"
urlpatterns = [
    path("", views.webhook_list_page, name="list"),
    path("new/", views.webhook_create_page, name="create"),
    path("<int:endpoint_id>/", views.webhook_detail_page, name="detail"),
    path("<int:endpoint_id>/rotate/", views.webhook_rotate_page, name="rotate"),
    path("deliveries/<int:delivery_id>/redeliver/", views.webhook_redeliver_page, name="redeliver"),
    # The demo's receiver (404 unless LEPUS_DEMO_WEBHOOK_RECEIVER is set); the second path is
    # common.webhooks.DEMO_RECEIVER_PATH.
    path("demo-receiver/", views.demo_receiver_page, name="demo-receiver"),
    path("demo-receiver/deliver/", views.demo_receiver_deliver, name="demo-receiver-deliver"),
]
