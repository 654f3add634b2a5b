"""manage.py resume_training --run ID [--wait] --json

Re-queues a failed or cancelled training run from its last checkpoint (the teacher pass from its
last cached shard, Phase 2 from its last checkpoint; finished steps are not redone).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from common.management.base import LepusCommand
from training_bridge.management.commands.train import run_payload, wait_for
from training_bridge.models import TrainingRun
from training_bridge.services import training_run_resume


class Command(LepusCommand):
    help = "Resume a failed or cancelled training run from its checkpoint."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--run", type=int, required=True)
        parser.add_argument("--wait", action="store_true")
        parser.add_argument("--timeout", type=float, default=7 * 24 * 3600.0)

    def handle(self, *args: Any, **options: Any) -> None:
        run = TrainingRun.objects.filter(pk=options["run"]).first()
        if run is None:
            raise CommandError(f"training run {options['run']} does not exist")
        try:
            run = training_run_resume(run=run)
        except ValidationError as error:
            raise CommandError("; ".join(error.messages))
        if options["wait"]:
            run = wait_for(run, timeout=options["timeout"])
        self.emit(run_payload(run), human=f"run {run.pk}: {run.status}")
