"""REST API (mounted under /api/v1/) of training_bridge."""

from __future__ import annotations

from django.urls import path

from training_bridge import apis

app_name = "training_bridge_api"
urlpatterns = [
    path("training/runs", apis.TrainingRunListApi.as_view(), name="run-list"),
    path("training/runs/<int:run_id>", apis.TrainingRunDetailApi.as_view(), name="run-detail"),
    path(
        "training/runs/<int:run_id>/cancel", apis.TrainingRunCancelApi.as_view(), name="run-cancel"
    ),
    path(
        "training/runs/<int:run_id>/resume", apis.TrainingRunResumeApi.as_view(), name="run-resume"
    ),
    path(
        "training/evaluations",
        apis.RigelEvaluationListApi.as_view(),
        name="evaluation-list",
    ),
    path(
        "training/evaluations/<int:evaluation_id>",
        apis.RigelEvaluationDetailApi.as_view(),
        name="evaluation-detail",
    ),
    path(
        "training/metrics-leaderboard",
        apis.MetricLeaderboardApi.as_view(),
        name="metrics-leaderboard",
    ),
    path("score", apis.ScoreCreateApi.as_view(), name="score"),
    path("score/<int:request_id>", apis.ScoreDetailApi.as_view(), name="score-detail"),
]
