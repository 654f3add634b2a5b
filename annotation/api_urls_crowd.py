"""Worker API (fixed contract) and the curators' campaign API, under /api/v1/ (namespace
`annotation_api`)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.apis import crowd, crowd_campaigns, erasure

urlpatterns: list[URLPattern | URLResolver] = [
    # Worker API: the exact paths of the contract (no trailing slash).
    path("campaigns/<slug:slug>/join", crowd.CampaignJoinApi.as_view(), name="campaign-join"),
    path(
        "worker/assignments/next",
        crowd.AssignmentNextApi.as_view(),
        name="worker-assignment-next",
    ),
    path(
        "worker/assignments/<int:assignment_id>/submit",
        crowd.AssignmentSubmitApi.as_view(),
        name="worker-assignment-submit",
    ),
    path("worker/me", crowd.WorkerMeApi.as_view(), name="worker-me"),
    path("worker/erase", erasure.WorkerEraseApi.as_view(), name="worker-erase"),
    # Curators.
    path("campaigns/", crowd_campaigns.CampaignListApi.as_view(), name="campaign-list"),
    path(
        "campaigns/<slug:slug>/",
        crowd_campaigns.CampaignDetailApi.as_view(),
        name="campaign-detail",
    ),
    path(
        "campaigns/<slug:slug>/invites",
        crowd_campaigns.CampaignInviteApi.as_view(),
        name="campaign-invite-create",
    ),
    path(
        "campaigns/<slug:slug>/payments",
        crowd_campaigns.CampaignPaymentsApi.as_view(),
        name="campaign-payments",
    ),
]
