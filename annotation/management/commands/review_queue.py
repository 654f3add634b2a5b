"""`manage.py review_queue SLUG [--json] [--limit N]`: the expert review queue of a campaign."""

from __future__ import annotations

from typing import Any

from annotation.management.campaign_command import CampaignCommand
from annotation.quality.selectors import review_queue_summary
from common.management.arguments import LIMIT


class Command(CampaignCommand):
    """List the review queue, worst disagreement first. Prints {"open": n, "resolved": n,
    "items": [{"candidate": id, "range": r}, ...]} with --json (items: open and claimed,
    candidate = CampaignCandidate id)."""

    arguments = (LIMIT.but(help="List at most this many items."),)

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = self.campaign(options)
        payload = review_queue_summary(campaign=campaign, limit=options["limit"])
        lines = [f"Open: {payload['open']}, resolved: {payload['resolved']}"] + [
            f"  candidate {row['candidate']}: range {row['range']}" for row in payload["items"]
        ]
        self.emit(payload, "\n".join(lines))
