"""What every caption metric takes and gives: the item it scores (`MetricItem`, with its clip as a
`Video`), the `CaptionMetric` protocol, and the label each metric shows people.

It sits below both the metrics (clip.py, pacs.py, polos.py, ...) and their registry (plugins.py,
which re-exports these names), so a metric never imports the registry that lists it. See plugins.py
for the contract in full.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

# Table key -> label, for every metric of the registry (plugins.METRIC_NAMES), in table order.
LABELS = {
    "bleu1": "BLEU-1",
    "bleu2": "BLEU-2",
    "bleu3": "BLEU-3",
    "bleu4": "BLEU-4",
    "rougeL": "ROUGE-L",
    "meteor": "METEOR",
    "cider": "CIDEr",
    "clipscore": "CLIP-S",
    "refclipscore": "RefCLIP-S",
    "emscore": "EMScore",
    "emscore_ref": "EMScore (ref)",
    "lclipscore": "L-CLIPScore",
    "reflclipscore": "RefL-CLIPScore",
    # The embedding-based plug-ins (embedding_plugins.py).
    "pacs": "PAC-S",
    "refpacs": "RefPAC-S",
    "pacs_plus": "PAC-S++",
    "refpacs_plus": "RefPAC-S++",
    "factvc": "FactVC",
    "factvc_ref": "FactVC (ref)",
    "polos": "Polos",
    "redemption": "Redemption Score",
    "expert_judge": "EXPERT (judge)",
    "gveval_judge": "G-VEval style (judge)",
    "captionqa": "CaptionQA",
}


@dataclass(frozen=True)
class Video:
    """A clip's sampled frames, loaded on demand: `key` names the clip (one embedding per key)."""

    key: str
    load: Callable[[], np.ndarray]

    @classmethod
    def of(cls, key: str, frames: np.ndarray) -> Video:
        return cls(key, lambda: frames)


@dataclass(frozen=True)
class MetricItem:
    """One candidate caption to score, with its references and (optionally) its clip."""

    candidate: str
    references: tuple[str, ...] = ()
    video: Video | None = None


@runtime_checkable
class CaptionMetric(Protocol):
    name: str
    label: str
    needs_references: bool
    needs_video: bool

    def score(self, items: Sequence[MetricItem]) -> list[float]: ...


def whole_setting(value: Any, default: int, key: str) -> int:
    """A metric setting that counts something (frames, a batch, tokens): a whole number of at
    least 1, `default` where it is not given. The registry and the judges read theirs alike."""
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a whole number, not {value!r}") from None
    if number < 1:
        raise ValueError(f"{key} must be at least 1")
    return number
