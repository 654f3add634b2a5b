"""Quality pages of the dashboard (/dashboard/campaigns/<slug>/...): the campaign page
(`annotation:campaign-detail`), workers, review, audit log, leaderboard. One worker's page is the
curation wing's (it is also the data browser's worker page); erasing is the privacy wing's."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.quality import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("campaigns/<slug:slug>/", views.campaign_detail, name="campaign-detail"),
    path("campaigns/<slug:slug>/qc-runs/", views.qc_run_create, name="quality-run"),
    path("campaigns/<slug:slug>/workers/", views.workers, name="quality-workers"),
    path(
        "campaigns/<slug:slug>/workers/<int:participation_id>/exclude/",
        views.worker_exclude_view,
        name="quality-worker-exclude",
    ),
    path(
        "campaigns/<slug:slug>/workers/<int:participation_id>/include/",
        views.worker_include_view,
        name="quality-worker-include",
    ),
    path("campaigns/<slug:slug>/review/", views.review_queue_view, name="review-queue"),
    path(
        "campaigns/<slug:slug>/review/claim-next/",
        views.review_claim_next_view,
        name="review-claim-next",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/",
        views.review_item_view,
        name="review-item",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/claim/",
        views.review_claim_view,
        name="review-claim",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/release/",
        views.review_release_view,
        name="review-release",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/resolve/",
        views.review_resolve_view,
        name="review-resolve",
    ),
    path("campaigns/<slug:slug>/audit/", views.audit_log, name="audit-log"),
    path(
        "campaigns/<slug:slug>/audit/<int:entry_id>/undo/",
        views.audit_undo_view,
        name="audit-undo",
    ),
    path("campaigns/<slug:slug>/leaderboard/", views.leaderboard, name="leaderboard"),
]
