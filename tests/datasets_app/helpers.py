"""Helpers of the ingest tests: slices of the real VATEX-EVAL file, command runners, snapshots."""

from __future__ import annotations

import io
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count, Max, Sum

from annotation.models import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    Participation,
    Worker,
)
from datasets_app.models import (
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ReferenceCaption,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
VATEX_EVAL_PATH = REPO_ROOT / "data" / "vatex_eval" / "vid_cans_score_dict.json"
EXAMPLES = REPO_ROOT / "docs" / "examples"


@lru_cache(maxsize=1)
def _vatex_eval_items() -> tuple[tuple[str, str], ...]:
    data = json.loads(VATEX_EVAL_PATH.read_text(encoding="utf-8"))
    return tuple((key, json.dumps(value)) for key, value in data.items())


def vatex_eval_entries(count: int, *, start: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """(clip id, entry) pairs of the real file, fresh copies."""
    return [(key, json.loads(value)) for key, value in _vatex_eval_items()[start : start + count]]


def write_vatex_eval(path: Path, entries: list[tuple[str, Any]]) -> Path:
    """One entry per line, so entry i (0-based) is on line i + 2."""
    body = ",\n".join(f"{json.dumps(key)}: {json.dumps(value)}" for key, value in entries)
    path.write_text("{\n" + body + "\n}\n", encoding="utf-8")
    return path


def run_command(name: str, *args: str) -> dict[str, Any]:
    """Run a management command with --json and parse its single JSON object."""
    out = io.StringIO()
    call_command(name, *args, "--json", stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def table_snapshot(*, light: bool = False) -> dict[str, Any]:
    """Every row count and the mutable counters, to show that nothing changed. `light` compares
    sums and maxima instead of every row (for the 54,000-judgment import)."""
    if light:
        return {
            "clips": Clip.objects.aggregate(n=Count("pk"), top=Max("pk")),
            "references": ReferenceCaption.objects.aggregate(n=Count("pk"), top=Max("pk")),
            "candidates": CandidateCaption.objects.aggregate(n=Count("pk"), top=Max("pk")),
            "batches": ImportBatch.objects.count(),
            "campaigns": Campaign.objects.count(),
            "campaign_candidates": CampaignCandidate.objects.aggregate(
                n=Count("pk"), quota=Sum("quota"), taken=Sum("slots_taken")
            ),
            "campaign_clips": CampaignClip.objects.aggregate(
                n=Count("pk"), candidates=Sum("candidates"), open=Sum("open_slots")
            ),
            "workers": Worker.objects.count(),
            "participations": Participation.objects.count(),
            "judgments": Judgment.objects.aggregate(n=Count("pk"), top=Max("pk")),
        }
    return {
        "clips": Clip.objects.count(),
        "references": ReferenceCaption.objects.count(),
        "systems": CaptioningSystem.objects.count(),
        "candidates": CandidateCaption.objects.count(),
        "batches": ImportBatch.objects.count(),
        "campaigns": Campaign.objects.count(),
        "campaign_candidates": sorted(
            CampaignCandidate.objects.values_list("pk", "quota", "slots_taken")
        ),
        "campaign_clips": sorted(
            CampaignClip.objects.values_list("pk", "candidates", "open_slots")
        ),
        "workers": Worker.objects.count(),
        "participations": Participation.objects.count(),
        "judgments": sorted(Judgment.objects.values_list("pk", "values")),
    }


def refused(command: str, path: Path, *extra: str) -> tuple[str, dict]:
    """Run an import command that must refuse the file: (the error, the --json payload)."""
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(command, str(path), *extra, "--json", stdout=out, stderr=io.StringIO())
    payload = json.loads(out.getvalue())
    assert payload["ok"] is False
    assert payload["file"] == str(path)
    assert str(caught.value) == payload["error"]
    return str(caught.value), payload


def created_counts(result: dict) -> dict:
    """The tables an import created rows in, with their counts."""
    return {table: n for table, n in result["created"].items() if n}


def load_examples() -> dict[str, Any]:
    """The documented examples up to the crowd judgments; returns the table snapshot after."""
    from annotation.imports import judgments_import
    from datasets_app.services.imports import candidates_import, vatex_import

    vatex_import(path=EXAMPLES / "vatex.json")
    candidates_import(path=EXAMPLES / "candidates.jsonl")
    candidates_import(path=EXAMPLES / "candidates.csv")
    judgments_import(path=EXAMPLES / "judgments.jsonl", campaign_slug="example-crowd")
    return table_snapshot()


def write_file(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def jsonl(*rows: dict) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)
