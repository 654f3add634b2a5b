"""Campaign pages of the dashboard (the crowd wing): the list at /dashboard/, create, edit, entry
links and invites, payments CSV, the campaign figures CSV, the preview as a worker and its four endpoints. The campaign's own page (`annotation:campaign-detail`,
/dashboard/campaigns/<slug>/) belongs to the quality pages."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.crowd.views import campaigns, preview

urlpatterns: list[URLPattern | URLResolver] = [
    path("", campaigns.campaign_list, name="campaign-list"),
    path("campaigns.csv", campaigns.campaign_list_csv, name="campaign-list-csv"),
    path("campaigns/new/", campaigns.campaign_new, name="campaign-create"),
    path("campaigns/<slug:slug>/edit/", campaigns.campaign_edit, name="campaign-edit"),
    path("campaigns/<slug:slug>/links/", campaigns.campaign_links, name="campaign-links"),
    path(
        "campaigns/<slug:slug>/payments.csv",
        campaigns.campaign_payments_csv,
        name="campaign-payments-csv",
    ),
    path("campaigns/<slug:slug>/preview/", preview.campaign_preview, name="preview"),
    path("campaigns/<slug:slug>/preview/join", preview.preview_join, name="preview-join"),
    path("campaigns/<slug:slug>/preview/next", preview.preview_next_view, name="preview-next"),
    path(
        "campaigns/<slug:slug>/preview/assignments/<int:assignment_id>/submit",
        preview.preview_submit_view,
        name="preview-submit",
    ),
    path("campaigns/<slug:slug>/preview/me", preview.preview_me_view, name="preview-me"),
]
