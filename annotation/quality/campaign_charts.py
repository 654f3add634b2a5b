"""The campaign page's charts, per question: Krippendorff's alpha over the QC runs (before and
after QC) and the histogram of ratings (kept and all)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict

from django.utils.safestring import SafeString

from annotation import charts
from annotation.figures import QC_NOT_RUN, campaign_agreement_figures
from annotation.models import Campaign
from annotation.quality.selectors import agreement_history, campaign_histograms


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


# ----------------------------------------------------------------------------------------------
# Campaign page
# ----------------------------------------------------------------------------------------------


class AgreementRow(TypedDict):
    key: str
    label: str
    figures: dict[str, Any]  # annotation.figures.campaign_agreement_figures, per question
    chart: SafeString


class HistogramRow(TypedDict):
    key: str
    label: str
    counts: dict[str, list[int]]  # {"all": [n1..n5], "kept": [n1..n5]}
    empty: bool
    chart: SafeString


def agreement_rows(campaign: Campaign, labels: dict[str, str]) -> list[AgreementRow]:
    """Per question: the agreement figures and the chart of alpha over the QC runs."""
    history = agreement_history(campaign=campaign)
    agreement = campaign_agreement_figures(campaign=campaign)
    rows: list[AgreementRow] = []
    for key in campaign.question_keys:
        points = history.get(key, [])
        alphas = [
            alpha
            for point in points
            for alpha in (point["alpha_all"], point["alpha_kept"])
            if alpha is not None
        ]
        low = min([0.0, *alphas])
        rows.append(
            {
                "key": key,
                "label": labels.get(key, key),
                "figures": agreement[key],
                "chart": charts.line_chart(
                    {
                        "before QC (all)": [
                            (_parse_time(point["computed_at"]), point["alpha_all"])
                            for point in points
                        ],
                        "after QC (kept)": [
                            (_parse_time(point["computed_at"]), point["alpha_kept"])
                            for point in points
                        ],
                    },
                    title=f"Krippendorff's alpha of {labels.get(key, key)} over time",
                    low=low,
                    high=1.0,
                    empty_message=f"No alpha yet: {agreement[key]['reason'] or QC_NOT_RUN}.",
                ),
            }
        )
    return rows


def histogram_rows(campaign: Campaign, labels: dict[str, str]) -> list[HistogramRow]:
    """Per question: the kept and all ratings' histogram."""
    histograms = campaign_histograms(campaign=campaign)
    return [
        {
            "key": key,
            "label": labels.get(key, key),
            "counts": histograms[key],
            "empty": not any(histograms[key]["all"]),
            "chart": charts.bar_chart(
                [(str(value), histograms[key]["kept"][value - 1]) for value in range(1, 6)],
                overlay=histograms[key]["all"],
                legend=("kept", "all"),
                title=f"Ratings of {labels.get(key, key)} (1 to 5)",
            ),
        }
        for key in campaign.question_keys
    ]
