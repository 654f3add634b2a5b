"""Per-clip vision features kept on the device: Phase 2's cache across steps, and the scoring
engine's within a batch whose samples share a video (the three protocols in one pass). No Django
import."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
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


def cached_features(
    engine: Any, batch: Any, keys: Sequence[Any], cache: VisionCache
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The merged video embeddings and DeepStack features of ``batch`` (a
    :class:`.batches.PreparedBatch`), the vision tower of ``engine`` (a :class:`.ScoringEngine`)
    running only on clips not yet in ``cache`` (keyed by ``keys``, one per row). The tower is
    frozen (Phase 2 trains LoRA on the language model only), so its features are constants."""
    missing: dict[Any, int] = {}
    for row, key in enumerate(keys):
        if key not in cache and key not in missing:
            missing[key] = row
    if missing:
        with torch.no_grad():
            sub = batch.select(list(missing.values()))
            pixel_values, grid_thw = engine.pixels(sub)
            embeds, deepstack = engine.vision_features(pixel_values, grid_thw, sub.grids)
        tokens = (sub.grids.prod(-1) // engine.backbone.vision.merge_size**2).tolist()
    else:
        tokens, embeds, deepstack = [], torch.empty(0), []
    parts = embeds.split(tokens) if missing else ()
    deep_parts = [d.split(tokens) for d in deepstack]
    fresh: dict[Any, tuple[torch.Tensor, list[torch.Tensor]]] = {}
    for k, key in enumerate(missing):
        fresh[key] = (parts[k].clone(), [d[k].clone() for d in deep_parts])
    rows = [fresh[key] if key in fresh else cache.get(key) for key in keys]
    for key, value in fresh.items():
        cache.put(key, value)
    embeds = torch.cat([r[0] for r in rows])
    deepstack = [torch.cat([r[1][i] for r in rows]) for i in range(len(rows[0][1]))]
    return embeds, deepstack


def keyed_features(
    engine: Any, batch: Any, keys: Sequence[Any] | None
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The video features of ``batch``'s rows (a :class:`.batches.PreparedBatch`), the vision
    tower of ``engine`` once per video key (``keys``, one per row; ``None``: once per row)."""
    if keys is not None and len(set(keys)) < len(keys):
        with torch.no_grad():
            return cached_features(engine, batch, keys, VisionCache(max_clips=len(keys)))
    pixel_values, grid_thw = engine.pixels(batch)
    return engine.vision_features(pixel_values, grid_thw, batch.grids)
