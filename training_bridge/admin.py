from __future__ import annotations

from django.contrib import admin

from training_bridge.models import MetricEvaluation, RetrainingState, ScoreRequest, TrainingRun


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "name",
        "release",
        "backbone",
        "ablation",
        "status",
        "phase",
        "progress",
        "validation_tau",
        "created_at",
    )
    list_filter = ("status", "ablation", "device", "trigger")
    search_fields = ("name", "backbone")
    readonly_fields = (
        "status",
        "phase",
        "progress",
        "progress_message",
        "completed_steps",
        "step_results",
        "history",
        "metrics",
        "evaluation",
        "artifacts",
        "checkpoint",
        "log_key",
        "log_tail",
        "chain_token",
        "error",
        "attempts",
        "worker_hostname",
        "task_id",
        "started_at",
        "finished_at",
        "heartbeat_at",
    )
    raw_id_fields = ("release", "created_by")


@admin.register(ScoreRequest)
class ScoreRequestAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "status", "created_at", "finished_at")
    list_filter = ("status",)
    raw_id_fields = ("run", "created_by")
    readonly_fields = ("items", "scores", "error")


@admin.register(RetrainingState)
class RetrainingStateAdmin(admin.ModelAdmin):
    list_display = ("singleton", "pending_release", "last_run", "last_checked_at", "last_outcome")
    raw_id_fields = ("pending_release", "last_run")


@admin.register(MetricEvaluation)
class MetricEvaluationAdmin(admin.ModelAdmin):
    list_display = ("id", "metric", "release", "train_split", "test_split", "created_at")
    list_filter = ("metric",)
    readonly_fields = ("fitted", "result", "metric_settings", "created_by", "created_at")
