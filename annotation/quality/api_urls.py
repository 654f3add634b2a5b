"""Curator API of quality control under /api/v1/campaigns/<slug>/ (namespace `annotation_api`):
one module of views per resource."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from annotation.quality.api import (
    aggregates,
    agreement,
    audit,
    calibration,
    controls,
    leaderboard,
    retest,
    review,
    runs,
    summary,
    workers,
)

urlpatterns: list[URLPattern | URLResolver] = [
    path(
        "campaigns/<slug:slug>/quality", summary.QualitySummaryApi.as_view(), name="quality-summary"
    ),
    path(
        "campaigns/<slug:slug>/quality/workers",
        workers.WorkerListApi.as_view(),
        name="quality-workers",
    ),
    path(
        "campaigns/<slug:slug>/quality/workers/<int:participation_id>/exclude",
        workers.WorkerExcludeApi.as_view(),
        name="quality-worker-exclude",
    ),
    path(
        "campaigns/<slug:slug>/quality/workers/<int:participation_id>/include",
        workers.WorkerIncludeApi.as_view(),
        name="quality-worker-include",
    ),
    path("campaigns/<slug:slug>/quality/runs", runs.QCRunListApi.as_view(), name="qc-runs"),
    path("campaigns/<slug:slug>/quality/retest", retest.RetestApi.as_view(), name="quality-retest"),
    path(
        "campaigns/<slug:slug>/quality/runs/<int:run_id>",
        runs.QCRunDetailApi.as_view(),
        name="qc-run-detail",
    ),
    path("campaigns/<slug:slug>/agreement", agreement.AgreementApi.as_view(), name="agreement"),
    path("campaigns/<slug:slug>/review", review.ReviewQueueApi.as_view(), name="review-queue"),
    path(
        "campaigns/<slug:slug>/review/claim-next",
        review.ReviewClaimNextApi.as_view(),
        name="review-claim-next",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>",
        review.ReviewDetailApi.as_view(),
        name="review-detail",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/claim",
        review.ReviewClaimApi.as_view(),
        name="review-claim",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/release",
        review.ReviewReleaseApi.as_view(),
        name="review-release",
    ),
    path(
        "campaigns/<slug:slug>/review/<int:item_id>/resolve",
        review.ReviewResolveApi.as_view(),
        name="review-resolve",
    ),
    path("campaigns/<slug:slug>/audit", audit.AuditListApi.as_view(), name="audit-list"),
    path(
        "campaigns/<slug:slug>/audit/<int:entry_id>/undo",
        audit.AuditUndoApi.as_view(),
        name="audit-undo",
    ),
    path(
        "campaigns/<slug:slug>/aggregates", aggregates.AggregateListApi.as_view(), name="aggregates"
    ),
    path(
        "campaigns/<slug:slug>/leaderboard",
        leaderboard.LeaderboardApi.as_view(),
        name="leaderboard",
    ),
    path("campaigns/<slug:slug>/controls", controls.ControlsApi.as_view(), name="controls"),
    # Rater-severity calibration.
    path(
        "campaigns/<slug:slug>/calibration",
        calibration.CalibrationApi.as_view(),
        name="calibration",
    ),
    path(
        "campaigns/<slug:slug>/calibration/runs",
        calibration.CalibrationRunListApi.as_view(),
        name="calibration-runs",
    ),
    path(
        "campaigns/<slug:slug>/calibration/runs/<int:run_id>",
        calibration.CalibrationRunDetailApi.as_view(),
        name="calibration-run-detail",
    ),
]
