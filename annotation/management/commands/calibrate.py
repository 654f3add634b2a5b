"""`manage.py calibrate SLUG [--json] [--async] [--workers]`: rater-severity calibration of a
campaign (see docs/quality.md, "Rater severity")."""

from __future__ import annotations

from typing import Any

from annotation.management.campaign_command import CampaignRunCommand, RunServices
from annotation.models import Campaign
from annotation.quality.calibration_job import (
    calibration_run_inline,
    calibration_run_start,
    worker_severities,
)
from common.management.declared import flag


class Command(CampaignRunCommand):
    """Fit the ordinal rater-severity model of the campaign per question (item quality + rater
    severity through shared thresholds) on its kept judgments, and store every worker's severity
    with its standard error and every candidate's calibrated scores. Prints {"run", "status",
    "judgments", "workers", "candidates", "questions": {key: fit statistics}} with --json;
    --workers adds {"severities": {worker: {key: {...}}}}."""

    runs = RunServices(
        label="Calibration run", start=calibration_run_start, inline=calibration_run_inline
    )
    arguments = (flag("--workers", help="Also print every worker's severities."),)

    def report(self, campaign: Campaign, run: Any, options: dict[str, Any]) -> None:
        summary = run.summary
        payload: dict[str, Any] = {
            "run": run.pk,
            "status": run.status,
            "judgments": summary["judgments"],
            "workers": summary["workers"],
            "candidates": summary["candidates"],
            "questions": summary["questions"],
        }
        lines = [
            f"Calibration run {run.pk}: {summary['judgments']} judgments, "
            f"{summary['workers']} workers, {summary['candidates']} candidates",
        ]
        for key, statistics in summary["questions"].items():
            lines.append(
                f"  {key}: severity sd {statistics['severity_sd']} (reliability "
                f"{statistics['severity_reliability']}), infit {statistics['infit_mean_square']}"
                f", outfit {statistics['outfit_mean_square']}, converged "
                f"{statistics['converged']} in {statistics['iterations']} iterations"
            )
        if options["workers"]:
            names = dict(
                campaign.participations.values_list("id", "worker__external_id").iterator()
            )
            severities = worker_severities(campaign=campaign)
            payload["severities"] = {
                names[participation]: entries for participation, entries in severities.items()
            }
            for participation, entries in severities.items():
                lines.append(
                    f"  {names[participation]}: "
                    + ", ".join(
                        f"{key} {entry['severity']:+.2f} ± {entry['standard_error']:.2f}"
                        for key, entry in entries.items()
                    )
                )
        self.emit(payload, "\n".join(lines))
