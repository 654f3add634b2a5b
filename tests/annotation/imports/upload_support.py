"""What the upload tests share: the row counts a refused upload must leave as they were, and a
judgments file that the importer refuses at a known line and field."""

from __future__ import annotations

from pathlib import Path

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
    VideoAttachJob,
)

WRITTEN_TABLES = (
    Clip,
    ReferenceCaption,
    CandidateCaption,
    CaptioningSystem,
    ImportBatch,
    Campaign,
    CampaignClip,
    CampaignCandidate,
    Worker,
    Participation,
    Judgment,
    VideoAttachJob,
)

# Line 4 rates 7 on a 1–5 scale; lines 2 and 3 are fine, so a partial write would show.
BAD_JUDGMENTS_CSV = (
    "rater_id,candidate_id,overall\n"
    "ann-01,example:ball:captioner-a,4\n"
    "ann-02,example:ball:captioner-a,5\n"
    "ann-03,example:ball:captioner-a,7\n"
)


def row_counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in WRITTEN_TABLES}


def write_bad_judgments(folder: Path, name: str = "judgments-bad.csv") -> Path:
    path = folder / name
    path.write_text(BAD_JUDGMENTS_CSV, encoding="utf-8")
    return path
