"""`manage.py run_qc SLUG [--json] [--async]`: a full quality-control recompute of a campaign."""

from __future__ import annotations

from typing import Any

from annotation.management.campaign_command import CampaignRunCommand, RunServices
from annotation.models import Campaign
from annotation.quality.run import qc_run_inline, qc_run_start


class Command(CampaignRunCommand):
    """Recompute worker statistics, apply the campaign's QC rules (excluding workers who trip
    them), measure agreement, refresh the review queue and the aggregates. Prints {"workers",
    "excluded": [{"worker", "rules"}], "flagged": [{"worker", "rules"}], "judgments_excluded",
    "review_items"} with --json: the state after the run (flagged: workers not excluded whom a
    rule flags, for a curator to look at)."""

    runs = RunServices(label="QC run", start=qc_run_start, inline=qc_run_inline)

    def report(self, campaign: Campaign, run: Any, options: dict[str, Any]) -> None:
        summary = run.summary
        payload = {
            "workers": summary["workers"],
            "excluded": summary["excluded"],
            "flagged": summary["flagged"],
            "judgments_excluded": summary["judgments_excluded"],
            "review_items": summary["review_items"],
        }
        lines = [
            f"Workers: {payload['workers']}",
            f"Excluded workers: {len(payload['excluded'])}",
            *[f"  {row['worker']}: {', '.join(row['rules'])}" for row in payload["excluded"]],
            f"Flagged workers (not excluded): {len(payload['flagged'])}",
            *[f"  {row['worker']}: {', '.join(row['rules'])}" for row in payload["flagged"]],
            f"Judgments excluded: {payload['judgments_excluded']}",
            f"Review queue: {payload['review_items']}",
        ]
        self.emit(payload, "\n".join(lines))
