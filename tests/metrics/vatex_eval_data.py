"""The shipped VATEX-EVAL judgments (data/vatex_eval/, MIT; see its NOTICE.md) as plain lists, for
the metric tests. Reading the file directly keeps the pure-metric tests free of the database."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

VATEX_EVAL_FILE = (
    Path(__file__).resolve().parents[2] / "data" / "vatex_eval" / "vid_cans_score_dict.json"
)


@dataclass(frozen=True)
class VatexEval:
    clip_ids: list[str]  # one per candidate
    candidates: list[str]
    references: list[list[str]]  # the clip's nine references, in file order
    rater_scores: np.ndarray  # (candidates, 3): the three rater slots


@lru_cache(maxsize=1)
def load_vatex_eval() -> VatexEval:
    data = json.loads(VATEX_EVAL_FILE.read_text(encoding="utf-8"))
    clip_ids, candidates, references, scores = [], [], [], []
    for clip_id, entry in data.items():
        ratings = ast.literal_eval(entry["scores"])
        for text, rating in zip(entry["cands"], ratings, strict=True):
            clip_ids.append(clip_id)
            candidates.append(text)
            references.append(list(entry["refs"][0]))
            scores.append(rating)
    return VatexEval(clip_ids, candidates, references, np.array(scores, dtype=np.float64))


def vatex_eval_subset(count: int) -> VatexEval:
    """The first `count` candidates (file order)."""
    full = load_vatex_eval()
    return VatexEval(
        full.clip_ids[:count],
        full.candidates[:count],
        full.references[:count],
        full.rater_scores[:count],
    )
