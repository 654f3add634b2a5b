"""The release's explanation set, `explanations.jsonl`: the workers' free-text reasons per
candidate and per criterion with the ratings, shaped like EXPERT's explanation datasets
(Polaris-exp / Nebula-exp: per image-caption pair, a score and one explanation per criterion —
fluency, relevance, descriptiveness; seed 004 `/work/shared/seeds/004_f903fcbfc94608d8.txt`,
"Executive Summary", line 37, and the authors' `exp_datasets/` of `hjkim811/EXPERT`).

A Lepus worker writes one reason per judgment (required when a rating is at or below the
campaign's `reason_required_at_or_below`, optional otherwise), not one per criterion. Each line
therefore lists, under every criterion the campaign asked, the kept judgments that gave a reason:
the worker's rating of that criterion, the reason, the worker's pseudonym (the one of
`raw_judgments`) and `prompted` — true when that rating is at or below the campaign's threshold,
i.e. the reason was asked for because of it. One line per released candidate with at least one
reason, in the split files' order, canonical JSON (sorted keys, no spaces, UTF-8), e.g.

    {"campaign":"vid-lepus","candidate_id":"c-12","clip_id":"abc_000010_000020",
     "criteria":{"descriptiveness":[{"prompted":true,"rating":2,"reason":"misses the dog",
     "worker":"w-3f2a..."}],"fluency":[...],"relevance":[...]},"overall":3.33,"split":"train",
     "text":"a man walks"}

Free text of workers is only released where the release includes raw judgments (the same rule as
`raw_judgments`): the file exists only then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from export.records import HashingWriter

EXPLANATIONS_FILE = "explanations.jsonl"


def _line(head: dict[str, Any], criteria: dict[str, list[dict[str, Any]]]) -> bytes:
    record = {**head, "criteria": criteria}
    return (
        json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    ).encode("utf-8")


def write_explanations(
    *, rows: Any, root: Path, split_names: list[str], question_keys: list[str], batch_size: int
) -> tuple[dict[str, str], int]:
    """Write `explanations.jsonl` from `explanation_rows` (grouped per candidate); returns
    ({relative path: sha256}, number of candidates with an explanation)."""
    out = HashingWriter(root / EXPLANATIONS_FILE)
    current: tuple[int, int] | None = None
    head: dict[str, Any] = {}
    criteria: dict[str, list[dict[str, Any]]] = {}
    count = 0
    try:
        while batch := rows.fetchmany(batch_size):
            for split, order, slug, threshold, clip, candidate, text, overall, values, reason, worker in batch:  # fmt: skip
                if (split, order) != current:
                    if current is not None:
                        out.write(_line(head, criteria))
                        count += 1
                    current = (split, order)
                    head = {
                        "campaign": slug,
                        "candidate_id": candidate,
                        "clip_id": clip,
                        "overall": float(overall),
                        "split": split_names[split],
                        "text": text,
                    }
                    criteria = {}
                ratings = json.loads(values) if isinstance(values, str) else dict(values)
                for key in question_keys:
                    rating = ratings.get(key)
                    if rating is None:
                        continue
                    criteria.setdefault(key, []).append(
                        {
                            "prompted": threshold is not None and int(rating) <= int(threshold),
                            "rating": int(rating),
                            "reason": reason.strip(),
                            "worker": json.loads(worker),
                        }
                    )
        if current is not None:
            out.write(_line(head, criteria))
            count += 1
    finally:
        rows.close()
    return {EXPLANATIONS_FILE: out.close()}, count
