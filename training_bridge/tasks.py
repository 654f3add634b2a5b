"""Celery tasks of training_bridge: thin shells that take ids and call one service.

Routing: names under `training_bridge.tasks.` go to the `training` queue (settings'
CELERY_TASK_ROUTES), where GPU workers listen; `training_bridge.check_retraining` (beat, every 600 s)
is light and stays on the default queue.
"""

from __future__ import annotations

from celery import shared_task


@shared_task(bind=True, name="training_bridge.tasks.run_step", acks_late=True)
def run_step(self, run_id: int, step: str, token: str) -> str:  # type: ignore[no-untyped-def]
    """One step of a training run (teacher, phase1, phase2, evaluate), chained by the service."""
    from training_bridge.services.runs import training_run_execute_step

    return training_run_execute_step(
        run_id=run_id, step=step, token=token, task_id=self.request.id or ""
    )


@shared_task(bind=True, name="training_bridge.tasks.score_request", acks_late=True)
def score_request(self, request_id: int) -> str:  # type: ignore[no-untyped-def]
    from training_bridge.services.scoring import score_request_execute

    return score_request_execute(request_id=request_id, task_id=self.request.id or "")


@shared_task(bind=True, name="training_bridge.tasks.rigel_evaluation", acks_late=True)
def rigel_evaluation(self, evaluation_id: int) -> str:  # type: ignore[no-untyped-def]
    """`evaluate_rigel` as a job: runs scored on a benchmark campaign (progress on the row)."""
    from training_bridge.services.rigel_benchmark import rigel_evaluation_execute

    return rigel_evaluation_execute(evaluation_id=evaluation_id, task_id=self.request.id or "")


@shared_task(name="training_bridge.check_retraining", ignore_result=True)
def check_retraining() -> dict:
    """Start a release and a run when enough candidates were finalised; re-publish the chains of
    runs that have been queued with no sign of life (broker down at the time)."""
    from training_bridge.services.retraining import retraining_check
    from training_bridge.services.runs import training_runs_republish_stale

    outcome = retraining_check()
    outcome["republished_runs"] = training_runs_republish_stale()
    return outcome


@shared_task(name="training_bridge.tasks.campaign_metric_score", ignore_result=True, acks_late=True)
def campaign_metric_score(campaign_id: int) -> dict:
    """Score a campaign's candidates that have no metric score yet with the campaign's metric
    (sent by name by annotation after candidates are added or a metric is set); progress and
    every candidate left unscored go to the log, and the counts to the return value."""
    from training_bridge.services.campaign_metric import campaign_metric_score as score

    result = score(campaign_id=campaign_id)
    return {
        "campaign": result.campaign_id,
        "metric": result.metric,
        "scored": len(result.scored),
        "failed": len(result.failed),
        "refused": result.refused,
    }
