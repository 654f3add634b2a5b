"""Training runs: create, start (a Celery chain on the `training` queue), execute one step, cancel,
resume.

Life of a run: created `queued` with a chain token; each step's task claims the row (queued ->
running, `common.jobs.job_claim`), runs the step under a heartbeat, records the step's result and
puts the row back to `queued` for the next step; the last step ends it `succeeded`. A step that
fails ends the run `failed`; a cancel ends it `cancelled`; a dead worker's run is failed by
`common.tasks.reap_orphaned_jobs`. `training_run_resume` re-queues a failed or cancelled run with a
new chain token and a chain of the steps still to do; Phase 2 restarts from its last checkpoint and
the teacher pass from its last stored shard.

torch is never imported at module level here: web processes call these services.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import traceback
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from common import webhooks
from common.jobs import JobCancelled, job_claim, job_finish, job_requeue, json_safe
from common.models import JobStatus
from training_bridge.models import STEP_NAMES, TrainingRun, TrainingTrigger
from training_bridge.rigel.config import HYPERPARAMETER_NAMES, RigelConfig, with_stored_layout
from training_bridge.services.machine import training_default_backbone
from training_bridge.services.reporting import RunReporter, heartbeat

logger = logging.getLogger(__name__)

# The task (training_bridge/tasks.py) imports this module, so the chain names it.
RUN_STEP_TASK = "training_bridge.tasks.run_step"
MULTI_PROCESS_STEPS = ("teacher", "phase2")  # the same tuple as rigel.pipeline's (kept torch-free)


# --- configuration ----------------------------------------------------------------------------


def training_config_build(
    *,
    backbone: str,
    device: str,
    ablation: str,
    reference_free: bool,
    hyperparameters: dict[str, Any] | None,
) -> RigelConfig:
    """The run's `RigelConfig`; refuses unknown or invalid settings with a ValidationError."""
    values = dict(hyperparameters or {})
    reserved = sorted(set(values) - set(HYPERPARAMETER_NAMES))
    if reserved:
        raise ValidationError(f"unknown hyper-parameters: {', '.join(reserved)}")
    try:
        return RigelConfig.from_dict(
            {
                **values,
                "backbone": backbone,
                "device": device,
                "ablation": ablation,
                "reference_free": reference_free,
            }
        )
    except (TypeError, ValueError) as error:
        raise ValidationError(str(error)) from error


def training_run_config(*, run: TrainingRun) -> RigelConfig:
    return training_config_build(
        backbone=run.backbone,
        device=run.device,
        ablation=run.ablation,
        reference_free=run.reference_free,
        hyperparameters=with_stored_layout(run.hyperparameters or {}),
    )


def training_run_spec(*, run: TrainingRun) -> Any:
    from training_bridge.rigel.pipeline import RunSpec

    prefix = (run.release.storage_prefix or f"releases/{run.release_id}").rstrip("/")
    return RunSpec(
        run_prefix=run.storage_prefix,
        release_prefix=prefix,
        release_key=str(run.release_id),
        config=training_run_config(run=run),
    )


# --- create / start / cancel / resume ---------------------------------------------------------


def _release_is_published(release: Any) -> bool:
    return getattr(release, "status", None) == JobStatus.SUCCEEDED


REQUIRED_SPLITS = ("train", "validation")  # rigel.data's (kept torch-free and Django-free there)


@dataclass(frozen=True)
class ReleaseVideoCoverage:
    """How many of a release's candidates per split sit on a clip with a video (or sampled frames):
    the only ones a video model can train on. A release may mix clips without one (an imported
    VATEX-EVAL slice has scores but no videos); training leaves those out
    (`rigel.data.read_training_release`), and this says so before the job starts.

    Read from the release's records and their clips' current keys: a clip given a video after the
    build still has none in the release's files, which the run's first step then reports."""

    candidates: dict[str, int]
    with_video: dict[str, int]
    # The build's own count per split (`Release.counts`; absent for a release not built here).
    built: dict[str, int] | None = None

    @property
    def left_out(self) -> int:
        return sum(self.candidates.values()) - sum(self.with_video.values())

    def refusal(self, *, release_id: int) -> str:
        """Why no run can start on the release ("" when one can): a required split whose
        candidates all sit on clips without video."""
        for split in REQUIRED_SPLITS:
            if self.built is not None and not self.built.get(split, 0):
                return (
                    f"release {release_id} has no candidates in its {split} split: every "
                    "candidate of its campaigns was left out (see the release's page: below "
                    "quota, under review, ...). Build a release once its campaigns have "
                    "finalised candidates."
                )
            if self.candidates.get(split, 0) and not self.with_video.get(split, 0):
                return (
                    f"release {release_id} has no clip with a video in its {split} split: "
                    f"its {self.candidates[split]} {split} candidates are all on clips without "
                    "video (e.g. the imported VATEX-EVAL slice, which has scores but no videos), "
                    "and a video model cannot train on them. Build a release that includes a "
                    "campaign whose clips have videos."
                )
        return ""

    def summary(self) -> str:
        """What the run trains on, when some candidates are left out ("" when none are)."""
        if not self.left_out:
            return ""
        kept = sum(self.with_video.values())
        return (
            f"It trains on the {kept} candidates whose clips have a video; "
            f"{self.left_out} candidates on clips without video are left out."
        )


def training_release_video_coverage(*, release: Any) -> ReleaseVideoCoverage:
    from django.db.models import Count, Q

    from export.models import SPLIT_NAMES, ReleaseRecord

    has_video = ~Q(clip__video_key="") | ~Q(clip__frames_key="")
    rows = (
        ReleaseRecord.objects.filter(release_id=release.pk)
        .values("split")
        .annotate(
            candidates=Count("campaign_candidate_id"),
            with_video=Count("campaign_candidate_id", filter=has_video),
        )
        .order_by("split")
    )
    splits = (release.counts or {}).get("splits")
    return ReleaseVideoCoverage(
        candidates={SPLIT_NAMES[row["split"]]: row["candidates"] for row in rows},
        with_video={SPLIT_NAMES[row["split"]]: row["with_video"] for row in rows},
        built={name: int(split.get("candidates", 0)) for name, split in splits.items()}
        if isinstance(splits, dict)
        else None,
    )


@transaction.atomic
def training_run_create(
    *,
    release: Any,
    backbone: str | None = None,
    device: str = "cpu",
    ablation: str = "full",
    reference_free: bool = False,
    hyperparameters: dict[str, Any] | None = None,
    processes: int = 1,
    name: str = "",
    trigger: str = TrainingTrigger.DASHBOARD,
    created_by: Any = None,
    start: bool = True,
) -> TrainingRun:
    """Record a run on a published release and (after commit) publish its chain."""
    if not _release_is_published(release):
        raise ValidationError("training needs a release whose build succeeded")
    refusal = training_release_video_coverage(release=release).refusal(release_id=release.pk)
    if refusal:
        raise ValidationError(refusal)
    # Without a choice: the configured backbone where a GPU is offered, the tiny one on a CPU-only
    # machine (services.machine), so a default run never reaches for 2 B weights it cannot use.
    backbone = str(backbone or training_default_backbone()).strip()
    config = training_config_build(
        backbone=backbone,
        device=device,
        ablation=ablation,
        reference_free=reference_free,
        hyperparameters=hyperparameters,
    )
    if not 1 <= int(processes) <= 64:
        raise ValidationError("processes must be between 1 and 64")
    if len(name) > 200:
        raise ValidationError("name must be at most 200 characters")
    stored = {key: config.to_dict()[key] for key in HYPERPARAMETER_NAMES}
    run = TrainingRun.objects.create(
        release=release,
        name=name.strip(),
        backbone=config.backbone,
        device=config.device,
        ablation=config.ablation,
        reference_free=config.reference_free,
        hyperparameters=stored,
        processes=int(processes),
        trigger=trigger,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        chain_token=secrets.token_hex(16),
    )
    if start:
        training_run_publish(run=run)
    return run


def training_run_publish(*, run: TrainingRun) -> None:
    """Publish the chain of the run's remaining steps once the transaction commits; a broker that
    is down is logged, and `training_runs_republish_stale` publishes again later."""
    run_id, token, steps = run.pk, run.chain_token, run.remaining_steps

    def publish() -> None:
        from celery import chain, signature

        try:
            chain(
                *(
                    signature(RUN_STEP_TASK, args=(run_id, step, token), immutable=True)
                    for step in steps
                )
            ).apply_async(retry=False)
        except Exception as error:  # kombu raises OperationalError, socket errors, timeouts
            logger.warning(
                "could not publish training run %s: %s; a sweep will retry", run_id, error
            )

    transaction.on_commit(publish)


def training_run_cancel(*, run: TrainingRun) -> TrainingRun:
    """Cancel at once when waiting between steps; else ask the running step to stop (it raises
    JobCancelled at its next progress report)."""
    now = timezone.now()
    stopped = TrainingRun.objects.filter(pk=run.pk, status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED,
        cancel_requested=True,
        finished_at=now,
        progress_message="cancelled before the next step",
    )
    if not stopped:
        requested = TrainingRun.objects.filter(pk=run.pk, status=JobStatus.RUNNING).update(
            cancel_requested=True
        )
        if not requested:
            raise ValidationError(
                f"run {run.pk} is {run.status}; only active runs can be cancelled"
            )
    run.refresh_from_db()
    return run


@transaction.atomic
def training_run_resume(*, run: TrainingRun) -> TrainingRun:
    """Re-queue a failed or cancelled run from its checkpoints with a fresh chain."""
    locked = TrainingRun.objects.select_for_update().get(pk=run.pk)
    if not job_requeue(job=locked):
        raise ValidationError(
            f"run {run.pk} is {locked.status}; only failed or cancelled runs resume"
        )
    locked.chain_token = secrets.token_hex(16)
    locked.save(update_fields=["chain_token"])
    locked.refresh_from_db()
    training_run_publish(run=locked)
    return locked


def training_runs_republish_stale(*, older_than_seconds: int = 900) -> int:
    """Publish again the chains of runs queued for long with no sign of life (the broker was down
    when they were created or resumed). Duplicate messages are harmless: a step only runs when
    the steps before it are done and it can claim the row."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    stale = TrainingRun.objects.filter(status=JobStatus.QUEUED, created_at__lt=cutoff).exclude(
        heartbeat_at__gte=cutoff
    )
    count = 0
    for run in stale:
        with transaction.atomic():
            training_run_publish(run=run)
        count += 1
    return count


# --- executing a step (the Celery task's body) ------------------------------------------------


def training_run_execute_step(*, run_id: int, step: str, token: str, task_id: str = "") -> str:
    """Run `step` of the run if this chain still drives it and the steps before are done.

    Returns what happened: "done" (already completed), "stale" (an older chain), "waiting" (an
    earlier step is not done), "busy" (claimed elsewhere or not queued), "cancelled", "failed",
    "ok", or "missing".
    """
    run = TrainingRun.objects.select_related("release").filter(pk=run_id).first()
    if run is None:
        return "missing"
    if run.chain_token != token:
        return "stale"
    if step in (run.completed_steps or []):
        return "done"
    index = STEP_NAMES.index(step)
    if any(name not in (run.completed_steps or []) for name in STEP_NAMES[:index]):
        return "waiting"
    if run.cancel_requested:
        TrainingRun.objects.filter(pk=run.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.CANCELLED, finished_at=timezone.now()
        )
        return "cancelled"
    claimed = job_claim(model=TrainingRun, job_id=run.pk, task_id=task_id)
    if claimed is None:
        return "busy"
    run = TrainingRun.objects.select_related("release").get(pk=run.pk)
    TrainingRun.objects.filter(pk=run.pk).update(phase=step)
    run.phase = step
    reporter = RunReporter(run, step)
    reporter.log(f"{step}: started (attempt {run.attempts}, worker {run.worker_hostname})")
    try:
        with heartbeat(TrainingRun, run.pk):
            result = _execute(run=run, step=step, reporter=reporter)
    except JobCancelled:
        reporter.log(f"{step}: cancelled")
        reporter.flush()
        reporter.save_log()
        job_finish(job=run, status=JobStatus.CANCELLED, progress_message="cancelled")
        return "cancelled"
    except Exception as error:  # any failure of the step ends the run failed, with the reason
        logger.exception("training run %s: step %s failed", run.pk, step)
        reporter.log(f"{step}: failed: {error}")
        reporter.flush()
        reporter.save_log()
        job_finish(
            job=run,
            status=JobStatus.FAILED,
            error=f"{step}: {error}\n\n{traceback.format_exc()}",
        )
        webhooks.emit("training_run.failed", {"run_id": run.pk, "step": step, "error": str(error)[:500]})  # fmt: skip
        return "failed"
    reporter.log(f"{step}: finished")
    reporter.flush()
    log_key = reporter.save_log()
    _record_step(run=run, step=step, result=result, log_key=log_key, reporter=reporter)
    return "ok"


def _record_step(
    *, run: TrainingRun, step: str, result: dict[str, Any], log_key: str, reporter: RunReporter
) -> None:
    from training_bridge.rigel.pipeline import artifact_keys

    # A correlation over constant scores is NaN (e.g. CIDEr on a tiny validation split), which
    # PostgreSQL's JSON refuses: it is stored as null, as every other job's figures are.
    result = json_safe(result)
    results = {**(run.step_results or {}), step: result}
    completed = [*(run.completed_steps or []), step]
    artifacts = artifact_keys(results)
    artifacts["log"] = log_key
    fields: dict[str, Any] = {
        "step_results": results,
        "completed_steps": completed,
        "artifacts": artifacts,
        "log_key": log_key,
    }
    if step == "phase2" and not result.get("skipped"):
        fields["checkpoint"] = {**(run.checkpoint or {}), "phase2": {}}
    if step == STEP_NAMES[-1]:
        finished = job_finish(
            job=run,
            status=JobStatus.SUCCEEDED,
            metrics=result.get("metrics", {}),
            evaluation=result.get("table", {}),
            progress_message="finished",
            **fields,
        )
        if finished:
            webhooks.emit("training_run.finished", {"run_id": run.pk, "metrics": result.get("metrics", {})})  # fmt: skip
    else:
        next_step = STEP_NAMES[STEP_NAMES.index(step) + 1]
        finished = bool(
            TrainingRun.objects.filter(pk=run.pk, status=JobStatus.RUNNING).update(
                status=JobStatus.QUEUED,
                heartbeat_at=timezone.now(),
                progress_message=f"waiting for {next_step}",
                **fields,
            )
        )
    if not finished:
        # The row left `running` under us (reaped or cancelled meanwhile): keep the step's work so
        # that a resume does not redo it, and leave the status alone.
        TrainingRun.objects.filter(pk=run.pk).update(**fields)


def _execute(*, run: TrainingRun, step: str, reporter: RunReporter) -> dict[str, Any]:
    from training_bridge.rigel.pipeline import run_step
    from training_bridge.store import DjangoStore

    spec = training_run_spec(run=run)
    if step in MULTI_PROCESS_STEPS and run.processes > 1:
        return _execute_torchrun(run=run, step=step, spec=spec, reporter=reporter)
    return run_step(
        step,
        spec=spec,
        store=DjangoStore(),
        reporter=reporter,
        results=run.step_results or {},
        checkpoint=run.checkpoint or {},
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # A torchrun launched by a worker that gets killed must not keep training on its own.
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def torchrun_command(*, processes: int, step: str, folder: Path, location: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "training_bridge.rigel.cli",
        "step",
        step,
        "--spec",
        str(folder / "spec.json"),
        "--store",
        location,
        "--results",
        str(folder / "results.json"),
        "--checkpoint",
        str(folder / "checkpoint.json"),
    ]


def _execute_torchrun(
    *, run: TrainingRun, step: str, spec: Any, reporter: RunReporter
) -> dict[str, Any]:
    """The same step under torchrun (one process per GPU), relaying its events to the run."""
    import json

    from training_bridge.rigel.cli import parse_event
    from training_bridge.store import store_location

    location, extra_env = store_location()
    with tempfile.TemporaryDirectory(prefix=f"lepus-run-{run.pk}-") as name:
        folder = Path(name)
        (folder / "spec.json").write_text(json.dumps(spec.to_dict()))
        (folder / "results.json").write_text(json.dumps(run.step_results or {}))
        (folder / "checkpoint.json").write_text(json.dumps(run.checkpoint or {}))
        command = torchrun_command(
            processes=run.processes, step=step, folder=folder, location=location
        )
        reporter.log(f"{step}: launching {run.processes} processes under torchrun")
        env = {**os.environ, **extra_env, "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            command,
            cwd=str(Path(settings.BASE_DIR)),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_die_with_parent,
        )
        result: dict[str, Any] | None = None
        tail: deque[str] = deque(maxlen=60)
        try:
            assert process.stdout is not None
            for line in process.stdout:
                event = parse_event(line.rstrip("\n"))
                if event is None:
                    tail.append(line.rstrip("\n"))
                    continue
                kind = event.get("event")
                if kind == "progress":
                    reporter.progress(float(event["fraction"]), str(event["message"]))
                elif kind == "point":
                    reporter.point(dict(event["values"]))
                elif kind == "log":
                    reporter.log(str(event["message"]))
                elif kind == "checkpoint":
                    reporter.checkpoint(str(event["phase"]), str(event["key"]), int(event["step"]))
                elif kind == "result":
                    result = dict(event["result"])
            code = process.wait()
        except BaseException:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
            raise
    if code != 0 or result is None:
        raise RuntimeError(f"torchrun exited with status {code}:\n" + "\n".join(tail))
    return result
