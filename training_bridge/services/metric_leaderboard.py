"""The Metrics leaderboard: every caption metric of the registry against a campaign's human
judgments under each protocol, the published figure beside ours where a paper prints one, and the
benchmarks Lepus has no judgments for with their published figures only.

`evaluate_metrics --campaign SLUG --save` stores a table (`MetricBoardTable`); the leaderboard
reads the latest per (campaign, protocol, reference count). Nothing is scored here: the page,
its CSV/JSON and the API all read `metric_leaderboard()`, so every figure shown is the stored one.

Not to be confused with a campaign's *systems* leaderboard (annotation: captioning systems ranked
by their human scores); this one ranks *metrics* by their agreement with the humans.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict

from django.db.models import JSONField
from django.db.models.expressions import RawSQL

from annotation.models import Campaign
from common.spreadsheet import spreadsheet_safe
from training_bridge.metrics.benchmark import CORRELATION_KEYS
from training_bridge.metrics.judge import CRITERIA
from training_bridge.metrics.plugins import LABELS, METRIC_NAMES
from training_bridge.metrics.published import (
    BENCHMARK_OF_CAMPAIGN,
    IMAGE_BENCHMARKS,
    PUBLISHED,
    published_for,
    published_setting,
)
from training_bridge.models import MetricBoardTable

PROTOCOL_LABELS = {
    "default": "against each candidate's aggregate score",
    "emscore": "per rater slot, averaged (the EMScore paper's VATEX-EVAL protocol)",
}
NOT_RUN = "not in the saved run (evaluate_metrics --save --metrics ... to add it)"
NO_JUDGMENTS = (
    "no table of this benchmark saved yet: convert its files (python -m training_bridge.rigel.cli "
    "convert-images), import them (manage.py import_images --campaign SLUG), then manage.py "
    "evaluate_metrics --campaign SLUG --save; the table shows as its own section"
)


class LeaderboardSection(TypedDict):
    """One stored table: its campaign, protocol and reference setting, and a row per metric
    ({"metric", "label", correlation: value, "unavailable", "published"})."""

    id: int
    campaign: str
    campaign_name: str
    benchmark: str
    kind: str
    protocol: str
    protocol_label: str
    references: int | None
    references_label: str
    candidates: int
    computed_at: str
    settings: dict[str, str]
    rows: list[dict[str, Any]]


class PublishedOnly(TypedDict):
    """A benchmark Lepus holds no judgments for: its published figures only."""

    benchmark: str
    kind: str
    ours: str
    rows: list[dict[str, object]]


class Leaderboard(TypedDict):
    sections: list[LeaderboardSection]
    published_only: list[PublishedOnly]


class JudgeAnswer(TypedDict):
    label: str
    score: float | None
    criteria: list[tuple[str, str]]
    answer: str
    table: int
    computed_at: datetime


class JudgePanel(TypedDict):
    """What the candidate page renders with `template`."""

    title: str
    template: str
    rows: list[JudgeAnswer]


def metric_board_save(
    *,
    campaign: Campaign,
    protocol: str,
    reference_count: int | None,
    table: Mapping[str, Mapping[str, Any]],
    candidates: int,
    references_per_candidate: int | None,
    settings: Mapping[str, str],
    keys: Sequence[int] = (),
    judged: Mapping[str, Sequence[Any]] | None = None,
) -> MetricBoardTable:
    """Store one `evaluate_metrics` table for the leaderboard, with the generative judges'
    answers (`judged`: {metric: `JudgeRecord` per row}) per campaign candidate (`keys`, the
    benchmark's row ids) for the candidate page."""
    explanations: dict[str, dict[str, Any]] = {}
    for name, records in (judged or {}).items():
        for key, record in zip(keys, records, strict=True):
            explanations.setdefault(str(key), {})[name] = {
                "score": record.score,
                "explanation": record.explanation,
                "answer": (record.explanation_answer or record.score_answer)[:2000],
            }
    return MetricBoardTable.objects.create(
        explanations=explanations,
        campaign=campaign,
        protocol=protocol,
        reference_count=reference_count,
        candidates=candidates,
        references_per_candidate=references_per_candidate,
        table={name: dict(row) for name, row in table.items()},
        settings=dict(settings),
    )


def _latest_tables() -> list[MetricBoardTable]:
    latest: dict[tuple[int, str, int | None], MetricBoardTable] = {}
    for board in MetricBoardTable.objects.select_related("campaign").order_by("-created_at", "-id"):
        latest.setdefault((board.campaign_id, board.protocol, board.reference_count), board)
    return sorted(
        latest.values(),
        key=lambda b: (b.campaign.slug, b.protocol, b.reference_count or 10_000),
    )


def _row(metric: str, values: Mapping[str, Any] | None, published: list[Any]) -> dict[str, Any]:
    values = values or {}
    unavailable = values.get("unavailable") if values else NOT_RUN
    return {
        "metric": metric,
        "label": LABELS.get(metric, metric),
        **{key: None if unavailable else values.get(key) for key in CORRELATION_KEYS},
        "unavailable": unavailable or None,
        "published": [figure.as_dict() for figure in published],
    }


def metric_leaderboard() -> Leaderboard:
    """{"sections": [one per stored table], "published_only": [image benchmarks]}; each section's
    rows are every registered metric (one not in the run says so) plus any other metric the run
    holds, each with its published figures."""
    sections: list[LeaderboardSection] = []
    for board in _latest_tables():
        benchmark = BENCHMARK_OF_CAMPAIGN.get(board.campaign.slug, "")
        names = list(METRIC_NAMES) + [name for name in board.table if name not in METRIC_NAMES]
        rows = []
        for name in names:
            setting = published_setting(name, board.reference_count, board.references_per_candidate)
            figures = published_for(benchmark, name, setting) if benchmark else []
            rows.append(_row(name, board.table.get(name), figures))
        sections.append(
            {
                "id": board.pk,
                "campaign": board.campaign.slug,
                "campaign_name": board.campaign.name,
                "benchmark": benchmark or board.campaign.name,
                "kind": "video",
                "protocol": board.protocol,
                "protocol_label": PROTOCOL_LABELS.get(board.protocol, board.protocol),
                "references": board.reference_count,
                "references_label": (
                    f"first {board.reference_count}"
                    if board.reference_count is not None
                    else f"all ({board.references_per_candidate or 0})"
                ),
                "candidates": board.candidates,
                "computed_at": board.created_at.isoformat(),
                "settings": board.settings,
                "rows": rows,
            }
        )
    published_only: list[PublishedOnly] = []
    for benchmark in IMAGE_BENCHMARKS:
        figures = [figure for figure in PUBLISHED if figure.benchmark == benchmark]
        published_only.append(
            {
                "benchmark": benchmark,
                "kind": "image",
                "ours": NO_JUDGMENTS,
                "rows": [figure.as_dict() for figure in figures],
            }
        )
    return {"sections": sections, "published_only": published_only}


def _cell(value: Any) -> str:
    """A CSV cell: numbers as they are (a negative correlation stays -12.5), text through the
    project's one spreadsheet-formula rule (`common.spreadsheet`)."""
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    return text if _is_number(text) else spreadsheet_safe(text)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def metric_leaderboard_csv(board: Leaderboard) -> str:
    """One line per (section, metric) and per published-only figure: ours and the published."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        [
            "benchmark",
            "campaign",
            "protocol",
            "references",
            "candidates",
            "metric",
            "label",
            *CORRELATION_KEYS,
            "unavailable",
            "published",
            "published_source",
        ]
    )

    def published_text(figures: list[dict[str, Any]]) -> tuple[str, str]:
        values = "; ".join(
            " ".join(f"{key}={value}" for key, value in figure["values"].items())
            for figure in figures
        )
        sources = "; ".join(
            f"{figure['source']}, {figure['place']}" + ("" if figure["verified"] else " (recalled)")
            for figure in figures
        )
        return values, sources

    for section in board["sections"]:
        for row in section["rows"]:
            values, sources = published_text(row["published"])
            writer.writerow(
                [
                    _cell(item)
                    for item in (
                        section["benchmark"],
                        section["campaign"],
                        section["protocol"],
                        section["references_label"],
                        section["candidates"],
                        row["metric"],
                        row["label"],
                        *(row[key] for key in CORRELATION_KEYS),
                        row["unavailable"],
                        values,
                        sources,
                    )
                ]
            )
    for group in board["published_only"]:
        for figure in group["rows"]:
            values, sources = published_text([figure])
            writer.writerow(
                [
                    _cell(item)
                    for item in (
                        group["benchmark"],
                        "",
                        "",
                        figure["setting"],
                        "",
                        figure["metric"],
                        figure["label"],
                        *([None] * len(CORRELATION_KEYS)),
                        group["ours"],
                        values,
                        sources,
                    )
                ]
            )
    return out.getvalue()


def judge_explanations_panel(*, campaign_candidate_id: int) -> JudgePanel | None:
    """The candidate page's panel (annotation's `LEPUS_CANDIDATE_PANELS`): the latest stored
    answer of each generative judge for this campaign candidate, beside the workers' reasons."""
    rows: dict[str, JudgeAnswer] = {}
    key = str(campaign_candidate_id)
    # Only this candidate's entry is read from each stored table (a table of a full benchmark
    # holds thousands).
    boards = (
        MetricBoardTable.objects.filter(explanations__has_key=key)
        # A text key: Django's KeyTransform would read a key of digits as an array index.
        .annotate(entry=RawSQL("explanations -> %s", (key,), output_field=JSONField()))
        .order_by("-created_at", "-id")
        .values("pk", "created_at", "entry")
    )
    for board in boards:
        for metric, answer in board["entry"].items():
            if metric not in rows:
                explanation = answer.get("explanation") or {}
                rows[metric] = {
                    "label": LABELS.get(metric, metric),
                    "score": answer.get("score"),
                    "criteria": [(name, explanation.get(name, "")) for name in CRITERIA],
                    "answer": "" if explanation else answer.get("answer", ""),
                    "table": board["pk"],
                    "computed_at": board["created_at"],
                }
    if not rows:
        return None
    return {
        "title": "Judge explanations",
        "template": "training_bridge/judge_explanations_panel.html",
        "rows": list(rows.values()),
    }
