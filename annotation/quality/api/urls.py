"""Curator API of quality control under /api/v1/campaigns/<slug>/ (namespace `annotation_api`)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.quality.api import views as quality

urlpatterns: list[URLPattern | URLResolver] = [
    path(
        "campaigns/<slug:slug>/quality", quality.QualitySummaryApi.as_view(), name="quality-summary"
    ),
    path(
        "campaigns/<slug:slug>/quality/workers",
        quality.WorkerListApi.as_view(),
        name="quality-workers",
    ),
    path(
        "campaigns/<slug:slug>/quality/workers/<int:participation_id>/exclude",
        quality.WorkerExcludeApi.as_view(),
        name="quality-worker-exclude",
    ),
    path(
        "campaigns/<slug:slug>/quality/workers/<int:participation_id>/include",
        quality.WorkerIncludeApi.as_view(),
        name="quality-worker-include",
    ),
    path("campaigns/<slug:slug>/quality/runs", quality.QCRunListApi.as_view(), name="qc-runs"),
    path(
        "campaigns/<slug:slug>/quality/runs/<int:run_id>",
        quality.QCRunDetailApi.as_view(),
        name="qc-run-detail",
    ),
    path("campaigns/<slug:slug>/agreement", quality.AgreementApi.as_view(), name="agreement"),
    path("campaigns/<slug:slug>/review", quality.ReviewQueueApi.as_view(), name="review-queue"),
    path(
        "campaigns/<slug:slug>/review/claim-next",
        quality.ReviewClaimNextApi.as_view(),
        name="review-claim-next",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>",
        quality.ReviewDetailApi.as_view(),
        name="review-detail",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/claim",
        quality.ReviewClaimApi.as_view(),
        name="review-claim",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/release",
        quality.ReviewReleaseApi.as_view(),
        name="review-release",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/resolve",
        quality.ReviewResolveApi.as_view(),
        name="review-resolve",
    ),
    path("campaigns/<slug:slug>/audit", quality.AuditListApi.as_view(), name="audit-list"),
    path(
        "campaigns/<slug:slug>/audit/<int:entry_id>/undo",
        quality.AuditUndoApi.as_view(),
        name="audit-undo",
    ),
    path("campaigns/<slug:slug>/aggregates", quality.AggregateListApi.as_view(), name="aggregates"),
    path("campaigns/<slug:slug>/leaderboard", quality.LeaderboardApi.as_view(), name="leaderboard"),
    path("campaigns/<slug:slug>/controls", quality.ControlsApi.as_view(), name="controls"),
]
