"""Services of training_bridge (see the modules): runs, scoring, scheduled retraining."""

from __future__ import annotations

from training_bridge.services.retraining import retraining_check
from training_bridge.services.runs import (
    training_config_build,
    training_release_video_coverage,
    training_run_cancel,
    training_run_create,
    training_run_execute_step,
    training_run_publish,
    training_run_resume,
    training_runs_republish_stale,
)
from training_bridge.services.scoring import (
    score_items_clean,
    score_request_create,
    score_request_execute,
)

__all__ = [
    "retraining_check",
    "score_items_clean",
    "score_request_create",
    "score_request_execute",
    "training_config_build",
    "training_release_video_coverage",
    "training_run_cancel",
    "training_run_create",
    "training_run_execute_step",
    "training_run_publish",
    "training_run_resume",
    "training_runs_republish_stale",
]
