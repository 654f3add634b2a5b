"""manage.py resume_training --run ID [--wait] --json

Re-queues a failed or cancelled training run from its last checkpoint (the teacher pass from its
last cached shard, Phase 2 from its last checkpoint; finished steps are not redone).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from common.management.arguments import command_errors, found
from common.management.base import LepusCommand
from common.management.declared import flag
from training_bridge.management.commands.train import run_payload, wait_for
from training_bridge.management.options import RUN_TIMEOUT, TRAINING_RUN
from training_bridge.models import TrainingRun
from training_bridge.services import training_run_resume


class Command(LepusCommand):
    """Resume a failed or cancelled training run from its checkpoint."""

    arguments = (TRAINING_RUN, flag("--wait"), RUN_TIMEOUT)

    def handle(self, *args: Any, **options: Any) -> None:
        run = found(
            TrainingRun.objects.filter(pk=options["run"]).first(),
            f"training run {options['run']} does not exist",
        )
        with command_errors(ValidationError):
            run = training_run_resume(run=run)
        if options["wait"]:
            run = wait_for(run, timeout=options["timeout"])
        self.emit(run_payload(run), human=f"run {run.pk}: {run.status}")
