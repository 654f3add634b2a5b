"""HTML pages of training_bridge, under /dashboard/training/."""

from __future__ import annotations

from django.urls import path

from training_bridge import views

app_name = "training_bridge"
urlpatterns = [
    path("", views.run_list, name="run-list"),
    path("start/", views.run_start, name="run-start"),
    path("compare/", views.run_compare, name="run-compare"),
    path("metrics/", views.metrics_leaderboard, name="metrics-leaderboard"),
    path("<int:run_id>/", views.run_detail, name="run-detail"),
    path("evaluations/start/", views.evaluation_start, name="evaluation-start"),
    path("evaluations/<int:evaluation_id>/", views.evaluation_detail, name="evaluation-detail"),
    path("<int:run_id>/cancel/", views.run_cancel, name="run-cancel"),
    path("<int:run_id>/resume/", views.run_resume, name="run-resume"),
]
