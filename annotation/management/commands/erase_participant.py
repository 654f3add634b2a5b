"""`manage.py erase_participant (--participation ID | --platform P --external-id X) [--dry-run]
[--json]`: erase a participant (docs/privacy.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from annotation.models import Platform
from annotation.privacy.services import ErasureRefused, participant_erase_by_reference
from common.management.arguments import DRY_RUN, command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg


class Command(LepusCommand):
    """Erase a participant everywhere: platform ids and free text deleted, judgments deleted or
    kept under a random pseudonym per campaign (its erasure_mode), aggregates and review queue
    recomputed, an audit entry per campaign. Prints {"erased": bool, "dry_run": bool,
    "participations": n, "campaigns": {slug: mode}, "judgments_deleted": n,
    "judgments_pseudonymised": n, "reasons_erased": n} with --json."""

    arguments = (
        Arg("--participation", type=int, help="A participation id of the person."),
        Arg(
            "--platform",
            choices=[Platform.PROLIFIC, Platform.MTURK, Platform.INVITE],
            help="The crowd platform of --external-id.",
        ),
        Arg("--external-id", help="The person's id on that platform."),
        DRY_RUN.but(help="Count what would be erased; change nothing."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["participation"] is None and not (
            options["platform"] and options["external_id"]
        ):
            raise CommandError("give --participation, or --platform with --external-id")
        with command_errors(ErasureRefused):
            outcome = participant_erase_by_reference(
                participation_id=options["participation"],
                platform=options["platform"],
                external_id=options["external_id"],
                requested_by="command",
                dry_run=options["dry_run"],
            )
        payload = outcome.as_dict()
        verb = "Would erase" if outcome.dry_run else "Erased"
        campaigns = ", ".join(f"{slug} ({mode})" for slug, mode in payload["campaigns"].items())
        self.emit(
            payload,
            f"{verb} {outcome.participations} participation(s) in {campaigns or 'no campaign'}: "
            f"{outcome.judgments_deleted} judgment(s) deleted, {outcome.judgments_pseudonymised} "
            f"kept under a pseudonym, {outcome.reasons_erased} reason(s) erased.",
        )
