"""manage.py check_retraining [--dry-run] --json

What the beat task `training_bridge.check_retraining` does every 10 minutes, on demand: when at
least LEPUS_RETRAIN_MIN_NEW_CANDIDATES candidates were finalised since the last release, build a
release; once it is published, start a training run on it. --dry-run only reports the decision.
"""

from __future__ import annotations

from typing import Any

from common.management.arguments import DRY_RUN
from common.management.base import LepusCommand
from training_bridge.services import retraining_check


class Command(LepusCommand):
    """Check whether enough new judgments exist to cut a release and retrain Rigel."""

    arguments = (DRY_RUN.but(help="Decide, change nothing."),)

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = retraining_check(dry_run=options["dry_run"])
        self.emit(outcome, human=f"retraining check: {outcome['action']}")
