"""How a running step reports: progress and cancellation through `common.jobs`, curve points and
log lines into the run row (throttled), checkpoints at once, and a heartbeat thread so that a
step busy in one long call (loading a backbone) is never taken for a dead worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from common import storage
from common.jobs import job_progress
from common.models import Job, JobStatus
from training_bridge.models import STEP_NAMES, TrainingRun

# Share of the whole run each step stands for in the progress bar.
STEP_WEIGHTS = {"teacher": 0.35, "phase1": 0.05, "phase2": 0.45, "evaluate": 0.15}
LOG_TAIL_LINES = 40


def step_base(step: str) -> float:
    return sum(STEP_WEIGHTS[name] for name in STEP_NAMES[: STEP_NAMES.index(step)])


class RunReporter:
    """The `Reporter` of `training_bridge.rigel.pipeline` for one step of one run."""

    def __init__(self, run: TrainingRun, step: str, *, interval: float = 1.0) -> None:
        self.run = run
        self.step = step
        self.interval = interval
        self.base = step_base(step)
        self.weight = STEP_WEIGHTS[step]
        self.history: list[dict[str, Any]] = list(run.history or [])
        self.latest: dict[str, Any] = {}
        self.log_lines: list[str] = []
        self._previous_log = ""
        if run.log_key and storage.exists(run.log_key):
            self._previous_log = storage.read_bytes(run.log_key).decode("utf-8", "replace")
        self._last_flush = 0.0
        self._last_progress = 0.0
        self._dirty = False
        self._trim_history()

    def _trim_history(self) -> None:
        """Drop this step's points that a re-run will produce again (after its checkpoint)."""
        if self.step == "phase2":
            resume_step = int((self.run.checkpoint or {}).get("phase2", {}).get("step", 0))
            self.history = [
                point
                for point in self.history
                if point.get("phase") != "phase2" or int(point.get("step", 0)) <= resume_step
            ]
        else:
            self.history = [point for point in self.history if point.get("phase") != self.step]

    # --- Reporter protocol --------------------------------------------------------------------
    def progress(self, fraction: float, message: str) -> None:
        now = time.monotonic()
        if now - self._last_progress < self.interval and fraction < 1.0:
            return
        self._last_progress = now
        self.flush()
        # Raises JobCancelled when a curator asked to cancel: the step stops here.
        job_progress(
            job=self.run,
            fraction=min(1.0, self.base + self.weight * max(0.0, min(1.0, fraction))),
            message=message,
        )

    def point(self, values: dict[str, Any]) -> None:
        self.history.append(values)
        for name in ("epoch", "step", "loss", "validation_tau"):
            if values.get(name) is not None:
                self.latest[name] = values[name]
        self._dirty = True
        if time.monotonic() - self._last_flush >= self.interval:
            self.flush()

    def log(self, message: str) -> None:
        stamp = timezone.now().strftime("%Y-%m-%d %H:%M:%S")
        self.log_lines.append(f"{stamp} [{self.step}] {message}")
        self._dirty = True

    def checkpoint(self, phase: str, key: str, step: int) -> None:
        # The resume point must be durable before the step goes on.
        pointers = dict(self.run.checkpoint or {})
        pointers[phase] = {"key": key, "step": step}
        self.run.checkpoint = pointers
        TrainingRun.objects.filter(pk=self.run.pk).update(checkpoint=pointers)
        self.flush()

    # --- persistence --------------------------------------------------------------------------
    def log_text(self) -> str:
        lines = "\n".join(self.log_lines)
        if not self._previous_log:
            return lines + ("\n" if lines else "")
        return self._previous_log.rstrip("\n") + "\n" + lines + ("\n" if lines else "")

    def tail(self) -> str:
        return "\n".join(self.log_text().splitlines()[-LOG_TAIL_LINES:])

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._dirty:
            return
        fields: dict[str, Any] = {"history": self.history, "log_tail": self.tail()}
        for name in ("epoch", "step"):
            if name in self.latest:
                fields[name] = int(self.latest[name])
        for name in ("loss", "validation_tau"):
            if name in self.latest:
                fields[name] = float(self.latest[name])
        TrainingRun.objects.filter(pk=self.run.pk).update(**fields)
        self._dirty = False

    def save_log(self) -> str:
        """Write the whole log to storage (never inside a transaction); returns its key."""
        key = f"{self.run.storage_prefix}/log.txt"
        storage.put_bytes(key, self.log_text().encode("utf-8"))
        TrainingRun.objects.filter(pk=self.run.pk).update(log_key=key, log_tail=self.tail())
        self.run.log_key = key
        return key


@contextmanager
def heartbeat(model: type[Job], pk: int, *, interval: float | None = None) -> Iterator[None]:
    """Refresh `heartbeat_at` of a running row from a side thread while the block runs."""
    period = interval or max(1.0, settings.LEPUS_JOB_HEARTBEAT_TIMEOUT / 4)
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(period):
                model.objects.filter(pk=pk, status=JobStatus.RUNNING).update(
                    heartbeat_at=timezone.now()
                )
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"heartbeat-{model.__name__}-{pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=period + 5)
