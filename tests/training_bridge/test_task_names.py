"""The services send their own tasks by name (the task modules import the services, not the other
way round): each name they send is the name of the task that runs it, registered with the app."""

from __future__ import annotations

from common.campaign_metric import CAMPAIGN_METRIC_SCORE_TASK
from config.celery import app
from training_bridge import tasks
from training_bridge.services.rigel_benchmark import RIGEL_EVALUATION_TASK
from training_bridge.services.runs import RUN_STEP_TASK
from training_bridge.services.scoring import SCORE_REQUEST_TASK


def test_every_name_a_service_sends_is_its_registered_task():
    sent = {
        RUN_STEP_TASK: tasks.run_step,
        SCORE_REQUEST_TASK: tasks.score_request,
        RIGEL_EVALUATION_TASK: tasks.rigel_evaluation,
        # Sent by annotation (which cannot import this app) after candidates are added.
        CAMPAIGN_METRIC_SCORE_TASK: tasks.campaign_metric_score,
    }
    app.loader.import_default_modules()
    for name, task in sent.items():
        assert task.name == name
        assert app.tasks[name].name == name
        # Routed by name to the GPU workers' queue (settings' CELERY_TASK_ROUTES).
        assert app.amqp.router.route({}, name)["queue"].name == "training"
