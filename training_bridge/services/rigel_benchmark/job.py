"""An evaluation as a job: recorded and checked on the web side, run by the `training` worker."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.models import Campaign
from common import storage
from common.jobs import job_claim, job_finish, job_progress, json_safe
from common.models import JobStatus
from common.tasks import enqueue, task_named
from training_bridge.metrics.plugins import METRIC_NAMES, TABLE_METRICS
from training_bridge.models import RigelEvaluation
from training_bridge.services.rigel_benchmark.evaluation import rigel_benchmark_evaluate
from training_bridge.services.rigel_benchmark.plan import (
    CORRELATIONS,
    Progress,
    RigelEvaluationError,
    check_foil_inputs,
    default_protocols,
    parse_protocols,
    protocol_plan,
    runs_for,
)

logger = logging.getLogger(__name__)

# The task (training_bridge/tasks.py) imports this module, so it is sent by its name.
RIGEL_EVALUATION_TASK = "training_bridge.tasks.rigel_evaluation"
FOIL_MAX_BYTES = 20 * 1024 * 1024


@transaction.atomic
def rigel_evaluation_create(
    *,
    run_ids: Sequence[int],
    campaign: Campaign,
    protocols: Sequence[str] | str | None = None,
    correlation: str = "emscore",
    foil_seed: int = 0,
    foil_file: bytes | None = None,
    metrics: Sequence[str] | None = None,
    created_by: Any = None,
) -> RigelEvaluation:
    """Record an evaluation job and enqueue it on the training queue (after commit). Inputs are
    checked here; the leakage check needs the releases' files and runs in the job."""
    try:
        runs = runs_for(run_ids)
        names = parse_protocols(protocols) if protocols else default_protocols(runs)
        protocol_plan(runs, names)  # the job scores no run under another setting's protocol
    except RigelEvaluationError as error:
        raise ValidationError(str(error)) from error
    if correlation not in CORRELATIONS:
        raise ValidationError(f"correlation must be one of {', '.join(CORRELATIONS)}")
    if not -(2**63) <= int(foil_seed) < 2**63:
        raise ValidationError("foil_seed must fit in 64 bits")
    chosen_metrics = list(dict.fromkeys(metrics)) if metrics is not None else list(TABLE_METRICS)
    unknown = [name for name in chosen_metrics if name not in METRIC_NAMES]
    if unknown:
        raise ValidationError(f"unknown metric(s) {', '.join(unknown)}")
    check_foil_inputs(names, has_file=foil_file is not None, error=ValidationError)
    if foil_file is not None and len(foil_file) > FOIL_MAX_BYTES:
        raise ValidationError(f"the FOIL file is larger than {FOIL_MAX_BYTES} bytes")
    evaluation = RigelEvaluation.objects.create(
        runs=[run.pk for run in runs],
        campaign=campaign,
        protocols=names,
        correlation=correlation,
        foil_seed=int(foil_seed),
        metrics=chosen_metrics,
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    if foil_file is not None:
        key = f"training/evaluations/{evaluation.pk}/foil.jsonl"
        storage.put_bytes(key, foil_file)
        evaluation.foil_key = key
        evaluation.save(update_fields=["foil_key"])
    enqueue(task_named(RIGEL_EVALUATION_TASK), evaluation.pk)
    return evaluation


def rigel_evaluation_execute(*, evaluation_id: int, task_id: str = "") -> str:
    """The Celery task's body: claim, evaluate with progress, finish."""
    from common.jobs import JobCancelled
    from training_bridge.services.reporting import heartbeat

    evaluation = job_claim(model=RigelEvaluation, job_id=evaluation_id, task_id=task_id)
    if evaluation is None:
        return "busy"

    def progress(fraction: float, message: str) -> None:
        job_progress(job=evaluation, fraction=fraction, message=message)

    try:
        with heartbeat(RigelEvaluation, evaluation.pk):
            foil_lines = None
            if evaluation.foil_key:
                foil_lines = storage.read_bytes(evaluation.foil_key).decode("utf-8").splitlines()
            result = rigel_benchmark_evaluate(
                runs=runs_for(evaluation.runs),
                campaign=Campaign.objects.get(pk=evaluation.campaign_id),
                protocols=evaluation.protocols,
                correlation=evaluation.correlation,
                foil_seed=evaluation.foil_seed,
                foil_lines=foil_lines,
                metrics=evaluation.metrics or TABLE_METRICS,
                progress=_throttled(progress),
            )
    except JobCancelled:
        job_finish(job=evaluation, status=JobStatus.CANCELLED, progress_message="cancelled")
        return "cancelled"
    except Exception as error:  # the job ends failed with the reason; the worker lives on
        logger.exception("Rigel evaluation %s failed", evaluation_id)
        job_finish(job=evaluation, status=JobStatus.FAILED, error=str(error))
        return "failed"
    job_finish(
        job=evaluation, status=JobStatus.SUCCEEDED, result=json_safe(result), progress_message=""
    )
    return "ok"


def _throttled(progress: Progress, interval: float = 1.0) -> Progress:
    last = [0.0]

    def report(fraction: float, message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= interval or fraction >= 1.0:
            last[0] = now
            progress(fraction, message)

    return report
