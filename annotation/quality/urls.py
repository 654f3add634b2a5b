"""Quality pages of the dashboard (/dashboard/campaigns/<slug>/...): the campaign page
(`annotation:campaign-detail`), workers, review, audit log, leaderboard."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.quality import views as dashboard

urlpatterns: list[URLPattern | URLResolver] = [
    path("campaigns/<slug:slug>/", dashboard.campaign_detail, name="campaign-detail"),
    path("campaigns/<slug:slug>/qc-runs/", dashboard.qc_run_create, name="quality-run"),
    path("campaigns/<slug:slug>/workers/", dashboard.workers, name="quality-workers"),
    path(
        "campaigns/<slug:slug>/workers/<int:participation_id>/exclude/",
        dashboard.worker_exclude_view,
        name="quality-worker-exclude",
    ),
    path(
        "campaigns/<slug:slug>/workers/<int:participation_id>/include/",
        dashboard.worker_include_view,
        name="quality-worker-include",
    ),
    path("campaigns/<slug:slug>/review/", dashboard.review_queue_view, name="review-queue"),
    path(
        "campaigns/<slug:slug>/review/claim-next/",
        dashboard.review_claim_next_view,
        name="review-claim-next",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/",
        dashboard.review_item_view,
        name="review-item",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/claim/",
        dashboard.review_claim_view,
        name="review-claim",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/release/",
        dashboard.review_release_view,
        name="review-release",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/resolve/",
        dashboard.review_resolve_view,
        name="review-resolve",
    ),
    path("campaigns/<slug:slug>/audit/", dashboard.audit_log, name="audit-log"),
    path(
        "campaigns/<slug:slug>/audit/<int:entry_id>/undo/",
        dashboard.audit_undo_view,
        name="audit-undo",
    ),
    path("campaigns/<slug:slug>/leaderboard/", dashboard.leaderboard, name="leaderboard"),
]
