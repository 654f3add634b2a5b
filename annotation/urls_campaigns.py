"""Campaign pages of the dashboard (crowd flow): the list at /dashboard/, create, edit, entry
links and invites, payments CSV, the campaign figures CSV. The campaign's own page (`annotation:campaign-detail`,
/dashboard/campaigns/<slug>/) belongs to the quality pages."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.views import campaigns

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
]
