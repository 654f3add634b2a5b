"""Per-clip vision features kept on the device: Phase 2's cache across steps, and the scoring
engine's within a batch whose samples share a video (the three protocols in one pass). No Django
import."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch


class VisionCache:
    """Least-recently-used cache of per-clip vision features (on the device), bounded in clips."""

    def __init__(self, max_clips: int = 2048):
        self.max_clips = max_clips
        self.items: OrderedDict[Any, tuple[torch.Tensor, list[torch.Tensor]]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __contains__(self, key: Any) -> bool:
        return key in self.items

    def get(self, key: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
        self.items.move_to_end(key)
        self.hits += 1
        return self.items[key]

    def put(self, key: Any, value: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
        self.items[key] = value
        self.misses += 1
        while len(self.items) > self.max_clips:
            self.items.popitem(last=False)
