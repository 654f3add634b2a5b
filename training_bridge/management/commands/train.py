"""manage.py train --release ID [--backbone PATH|tiny] [--device cpu|cuda] [--reference-free]
    [--preset default|paper-budget] [--wait] --json

Starts a Rigel training run on a published release (on the `training` queue) and prints
{"run": id, "status": ..., "metrics": {...}}. With --wait it returns once the run has finished;
with --inline it runs the four steps in this process instead of a worker (no broker needed).
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from common.management.arguments import command_errors, found
from common.management.base import LepusCommand
from common.management.declared import Arg, flag
from training_bridge.management.options import PRESET, RELEASE, RUN_TIMEOUT
from training_bridge.models import STEP_NAMES, TrainingAblation, TrainingRun, TrainingTrigger
from training_bridge.rigel.config import PRESETS, Ablation
from training_bridge.services import training_run_create, training_run_execute_step


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """NAME=VALUE pairs; values are JSON when they parse as JSON (numbers, booleans, lists)."""
    values: dict[str, Any] = {}
    for pair in pairs:
        name, separator, raw = pair.partition("=")
        if not separator or not name:
            raise CommandError(f"--set expects NAME=VALUE, got {pair!r}")
        try:
            values[name] = json.loads(raw)
        except json.JSONDecodeError:
            values[name] = raw
    return values


def run_payload(run: TrainingRun) -> dict[str, Any]:
    return {"run": run.pk, "status": run.status, "metrics": run.metrics or {}}


def wait_for(run: TrainingRun, *, timeout: float, poll: float = 1.0) -> TrainingRun:
    deadline = time.monotonic() + timeout
    while True:
        run.refresh_from_db()
        if run.is_finished or time.monotonic() >= deadline:
            return run
        time.sleep(poll)


def _result_text(run: TrainingRun) -> str:
    if run.metrics.get("test"):
        return f", test {json.dumps(run.metrics['test'])}"
    if run.has_no_test_split:
        return " (the release has no test split: no result figures; see evaluate_rigel)"
    return ""


class Command(LepusCommand):
    """Start a Rigel training run on a release (teacher pass, Phase 1, Phase 2, evaluation)."""

    arguments = (
        RELEASE.but(required=True, help="Id of a published release."),
        Arg(
            "--backbone",
            default=None,
            help="Local directory or HF-cache name of the VLM, or 'tiny' for the small random "
            "test model (default: LEPUS_DEFAULT_BACKBONE where a GPU is offered, else tiny; "
            "see LEPUS_TRAINING_DEVICES).",
        ),
        Arg("--device", default="cpu", help="cpu, cuda or cuda:N."),
        Arg(
            "--ablation",
            default=TrainingAblation.FULL,
            choices=[*[c.value for c in TrainingAblation], *Ablation.ALIASES],
            help="full, or one switch of the paper's Tables 3 and 5: lm-head, no-phase2, "
            "random-head, kl-loss (the run differs from the full method only there).",
        ),
        flag(
            "--reference-free",
            help="Train the whole method (teacher pass, Phase 1, Phase 2) on the reference-free "
            "prompt: the run for the paper's reference-free rows (Table 2, Tables 3 and 5).",
        ),
        PRESET.but(
            help="Visual input: default (8 frames at the checkpoint's pixel budget) or "
            "paper-budget (2 frames at 96x96 pixels: about the paper's 770 GFLOPs per inference "
            "with the reference-free prompt; docs/training.md). --set frames=... still wins."
        ),
        Arg("--processes", type=int, default=1, help="torchrun processes (GPUs)."),
        Arg("--name", default=""),
        Arg(
            "--set",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="A hyper-parameter, e.g. --set phase1_epochs=20 --set temperature=2.0.",
        ),
        flag("--wait", help="Return when the run finished."),
        flag(
            "--inline",
            help="Run the steps in this process instead of on a Celery worker (implies --wait).",
        ),
        RUN_TIMEOUT,
    )

    def handle(self, *args: Any, **options: Any) -> None:
        from export.models import Release

        release = found(
            Release.objects.filter(pk=options["release"]).first(),
            f"release {options['release']} does not exist",
        )
        with command_errors(ValidationError):
            run = training_run_create(
                release=release,
                backbone=options["backbone"],
                device=options["device"],
                ablation=Ablation.canonical(options["ablation"]),
                reference_free=options["reference_free"],
                hyperparameters={
                    **(PRESETS[options["preset"]] if options["preset"] else {}),
                    **parse_settings(options["set"]),
                },
                processes=options["processes"],
                name=options["name"],
                trigger=TrainingTrigger.COMMAND,
                start=not options["inline"],
            )
        self.note(f"training run {run.pk} created on release {release.pk}")
        if options["inline"]:
            for step in STEP_NAMES:
                outcome = training_run_execute_step(run_id=run.pk, step=step, token=run.chain_token)
                self.note(f"{step}: {outcome}")
                if outcome not in ("ok", "done"):
                    break
            run.refresh_from_db()
        elif options["wait"]:
            run = wait_for(run, timeout=options["timeout"])
        self.emit(
            run_payload(run),
            human=f"run {run.pk}: {run.status}" + _result_text(run),
        )
