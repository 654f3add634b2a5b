"""The engine's batch types: one prepared sample, and a right-padded batch of them.

A :class:`PreparedBatch` leaves the DataLoader workers pinned and reaches the device with
non-blocking copies. Frames are grouped by shape (one tensor per group of equal (T, H, W) and
target size) so that resizing and the patch layout run once per group on the device. Token ids
are padded on the RIGHT: with causal attention the real tokens never see the pads, so no
attention mask is needed and each row's answer position is its last real token.

No Django import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class SampleItem:
    """One sample as a worker prepares it (decoded frames, token ids, M-RoPE positions)."""

    frames: torch.Tensor  # (T, H, W, 3) uint8
    input_ids: torch.Tensor  # (L,)
    positions: torch.Tensor  # (3, L)
    grid: tuple[int, int, int]
    size: tuple[int, int]
    index: int


@dataclass
class PreparedBatch:
    frames: list[torch.Tensor]  # per shape group: (B_g, T, H, W, 3) uint8
    groups: list[list[int]]  # row numbers of each group, in the batch
    sizes: list[tuple[int, int]]  # target (h, w) per group
    input_ids: torch.Tensor  # (B, L) right-padded
    positions: torch.Tensor  # (3, B, L)
    lengths: torch.Tensor  # (B,)
    grids: torch.Tensor  # (B, 3)
    indices: torch.Tensor  # (B,) positions in the input list

    def select(self, rows: Sequence[int]) -> PreparedBatch:
        """The batch of these rows only (in this order), on the same device."""
        rows = list(rows)
        where = {}
        for g, group in enumerate(self.groups):
            for k, row in enumerate(group):
                where[row] = (g, k)
        frames, groups, sizes = [], [], []
        for g in range(len(self.groups)):
            picked = [(new, where[row][1]) for new, row in enumerate(rows) if where[row][0] == g]
            if picked:
                # index tensors reach the device without a blocking copy (no host sync)
                index = torch.tensor([k for _, k in picked]).to(
                    self.frames[g].device, non_blocking=True
                )
                frames.append(self.frames[g].index_select(0, index))
                groups.append([new for new, _ in picked])
                sizes.append(self.sizes[g])
        index = torch.tensor(rows, dtype=torch.long)

        def on(device: torch.device) -> torch.Tensor:
            return index.to(device, non_blocking=True)

        return PreparedBatch(
            frames=frames,
            groups=groups,
            sizes=sizes,
            input_ids=self.input_ids.index_select(0, on(self.input_ids.device)),
            positions=self.positions.index_select(1, on(self.positions.device)),
            lengths=self.lengths.index_select(0, on(self.lengths.device)),
            grids=self.grids.index_select(0, on(self.grids.device)),
            indices=self.indices.index_select(0, on(self.indices.device)),
        )

    def pin_memory(self) -> PreparedBatch:
        return PreparedBatch(
            frames=[f.pin_memory() for f in self.frames],
            groups=self.groups,
            sizes=self.sizes,
            input_ids=self.input_ids.pin_memory(),
            positions=self.positions.pin_memory(),
            lengths=self.lengths.pin_memory(),
            grids=self.grids.pin_memory(),
            indices=self.indices,
        )

    def to(self, device: torch.device) -> PreparedBatch:
        nb = device.type == "cuda"
        return PreparedBatch(
            frames=[f.to(device, non_blocking=nb) for f in self.frames],
            groups=self.groups,
            sizes=self.sizes,
            input_ids=self.input_ids.to(device, non_blocking=nb),
            positions=self.positions.to(device, non_blocking=nb),
            lengths=self.lengths.to(device, non_blocking=nb),
            grids=self.grids,
            indices=self.indices,
        )


def collate_samples(items: list[SampleItem], pad_id: int, multiple: int) -> PreparedBatch:
    """The workers' collate function: right-padded to a multiple of ``multiple`` tokens."""
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for row, item in enumerate(items):
        by_shape.setdefault((*item.frames.shape, *item.size), []).append(row)
    groups = list(by_shape.values())
    frames = [torch.stack([items[r].frames for r in rows]) for rows in groups]
    sizes = [items[rows[0]].size for rows in groups]
    lengths = torch.tensor([len(item.input_ids) for item in items], dtype=torch.long)
    length = int(lengths.max())
    length = -(-length // multiple) * multiple
    ids = torch.full((len(items), length), pad_id, dtype=torch.long)
    positions = torch.zeros((3, len(items), length), dtype=torch.long)
    for row, item in enumerate(items):
        n = len(item.input_ids)
        ids[row, :n] = item.input_ids
        positions[:, row, :n] = item.positions
        # pads continue the positions (never attended to by real tokens)
        positions[:, row, n:] = item.positions.max() + 1 + torch.arange(length - n)
    return PreparedBatch(
        frames=frames,
        groups=groups,
        sizes=sizes,
        input_ids=ids,
        positions=positions,
        lengths=lengths,
        grids=torch.tensor([list(item.grid) for item in items], dtype=torch.long),
        indices=torch.tensor([item.index for item in items], dtype=torch.long),
    )


def merge_batches(batches: Sequence[PreparedBatch], pad_id: int) -> PreparedBatch:
    """Concatenate prepared batches (already on their device) into one, right-padded."""
    if len(batches) == 1:
        return batches[0]
    length = max(int(b.input_ids.shape[1]) for b in batches)
    ids, positions = [], []
    keyed: dict[tuple[Any, ...], tuple[list[torch.Tensor], list[int], tuple[int, int]]] = {}
    offset = 0
    for b in batches:
        extra = length - int(b.input_ids.shape[1])
        ids.append(F.pad(b.input_ids, (0, extra), value=pad_id))
        positions.append(F.pad(b.positions, (0, extra)))
        for frames, rows, size in zip(b.frames, b.groups, b.sizes, strict=True):
            key = (*frames.shape[1:], *size)
            tensors, all_rows, _ = keyed.setdefault(key, ([], [], size))
            tensors.append(frames)
            all_rows.extend(offset + r for r in rows)
        offset += len(b.indices)
    return PreparedBatch(
        frames=[torch.cat(t) for t, _, _ in keyed.values()],
        groups=[rows for _, rows, _ in keyed.values()],
        sizes=[size for _, _, size in keyed.values()],
        input_ids=torch.cat(ids),
        positions=torch.cat(positions, dim=1),
        lengths=torch.cat([b.lengths for b in batches]),
        grids=torch.cat([b.grids for b in batches]),
        indices=torch.cat([b.indices for b in batches]),
    )
