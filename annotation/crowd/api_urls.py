"""Worker API (fixed contract) and the curators' campaign API, under /api/v1/ (namespace
`annotation_api`)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.crowd.api import campaigns, worker

urlpatterns: list[URLPattern | URLResolver] = [
    # Worker API: the exact paths of the contract (no trailing slash).
    path("campaigns/<slug:slug>/join", worker.CampaignJoinApi.as_view(), name="campaign-join"),
    path(
        "worker/assignments/next",
        worker.AssignmentNextApi.as_view(),
        name="worker-assignment-next",
    ),
    path(
        "worker/assignments/<int:assignment_id>/submit",
        worker.AssignmentSubmitApi.as_view(),
        name="worker-assignment-submit",
    ),
    path("worker/me", worker.WorkerMeApi.as_view(), name="worker-me"),
    # Curators.
    path("campaigns/", campaigns.CampaignListApi.as_view(), name="campaign-list"),
    path(
        "campaigns/<slug:slug>/",
        campaigns.CampaignDetailApi.as_view(),
        name="campaign-detail",
    ),
    path(
        "campaigns/<slug:slug>/invites",
        campaigns.CampaignInviteApi.as_view(),
        name="campaign-invite-create",
    ),
    path(
        "campaigns/<slug:slug>/payments",
        campaigns.CampaignPaymentsApi.as_view(),
        name="campaign-payments",
    ),
]
