"""`manage.py retest SLUG [--json]`: test-retest (intra-rater) consistency of a campaign."""

from __future__ import annotations

from typing import Any

from annotation.management.campaign_command import CampaignCommand
from annotation.quality.consistency import campaign_retest
from common.management.arguments import figure


class Command(CampaignCommand):
    """Test-retest consistency of a campaign: repeats served, repeat pairs, and quadratic-weighted
    kappa between first and second ratings per worker (only with at least min_pairs pairs),
    summarised per question and for the campaign by the mean and median over the workers (the
    kappa of the pooled tables beside it, labelled pooled). With --json prints the same object as
    GET /api/v1/campaigns/<slug>/quality/retest."""

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = self.campaign(options)
        figures = campaign_retest(campaign=campaign)
        lines = [
            f"repeat share {figures['retest_share']:.0%}, gap {figures['retest_min_gap']} clips; "
            f"{figures['repeats_submitted']} of {figures['repeats_served']} repeats rated, "
            f"{figures['pairs']} pairs; workers' own kappa: mean "
            f"{figure(figures['worker_kappa_mean'], 3)}, median "
            f"{figure(figures['worker_kappa_median'], 3)} over {figures['workers_with_kappa']} "
            f"worker(s); pooled across workers {figure(figures['pooled_kappa'], 3)}"
        ]
        lines += [
            f"{row['key']}: workers' kappa mean {figure(row['worker_kappa_mean'], 3)}, median "
            f"{figure(row['worker_kappa_median'], 3)}; pooled {figure(row['pooled_kappa'], 3)} over "
            f"{row['pairs']} pairs, exact agreement {figure(row['exact_agreement'], 3)}"
            for row in figures["questions"]
        ]
        lines += [
            f"worker {row['platform']}:{row['external_id']}: {row['pairs']} pairs, kappa "
            + (
                figure(row["kappa"], 3)
                if row["enough_pairs"]
                else f"not shown (fewer than {figures['min_pairs']} pairs)"
            )
            for row in figures["workers"]
        ]
        self.emit(figures, "\n".join(lines))
