"""Shared prefixes: one clip, several candidates.

Samples with the same video and the same references (in VATEX-EVAL every clip has 6 candidates
and the same 9 references) share everything before the candidate: frames, vision tower output and
the prompt up to the candidate. Such a clip is decoded once (:class:`.loading.GroupDataset`), its vision
tower runs once, and the language model reads its prefix once and keeps the keys and values of
every layer (the recording cache of :func:`cache_classes`); the candidates' suffixes then run
against that cache (:func:`suffix_hidden`): packed one row per clip (:func:`pack_suffixes`), or
one row per candidate against a copy of its clip's cache (:func:`suffix_attention_mask`), the
M-RoPE positions continuing the prefix's. With causal attention this is the same computation as
the whole sequence, candidate by candidate.

No Django import.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..inputs import RigelExample, sample_reference_free
from .batches import PreparedBatch, collate_samples, merge_batches
from .loading import GroupItem, common_prefix_length


def video_key(example: RigelExample) -> tuple[Any, ...] | None:
    """What must be equal for two samples to share their decoded frames and vision features: the
    same modality, the same video or image (file, frames directory/list or the same frames array
    object) and the same frame instants. ``None``: no key (the example stays alone)."""
    if example.frames is not None:
        video: tuple[Any, ...] = ("array", id(example.frames))
    elif example.frame_paths is not None:
        paths = example.frame_paths
        if isinstance(paths, (str, os.PathLike)):
            video = ("dir", os.fspath(paths))
        else:
            video = ("list", tuple(os.fspath(p) for p in paths))
    elif example.video_path is not None:
        video = ("file", os.fspath(example.video_path))
    else:
        return None
    return (
        example.modality,
        video,
        example.fps,
        tuple(example.frame_indices) if example.frame_indices is not None else None,
        tuple(example.frame_times) if example.frame_times is not None else None,
    )


def group_key(example: RigelExample, reference_free: bool) -> tuple[Any, ...] | None:
    """What must be equal for two samples to share their prompt prefix: the same
    :func:`video_key`, the same prompt setting (the sample's own, else ``reference_free``) and
    the same references (none in the reference-free prompt). ``None``: the example cannot be
    grouped."""
    video = video_key(example)
    if video is None:
        return None
    free = sample_reference_free(example, reference_free)
    references = () if free else tuple(example.references)
    return (video, free, references)


def plan_bundles(
    examples: Sequence[RigelExample], groups: Sequence[Sequence[int]]
) -> list[list[int]]:
    """Numbers of the groups that share one video (:func:`video_key`), in order of first use: a
    clip scored under several protocols (one group each) is decoded once, and its vision tower
    runs once (:meth:`ScoringEngine.forward_groups`)."""
    bundles: dict[Any, list[int]] = {}
    for number, group in enumerate(groups):
        key = video_key(examples[group[0]])
        bundles.setdefault(key if key is not None else ("alone", number), []).append(number)
    return list(bundles.values())


def plan_groups(examples: Sequence[RigelExample], reference_free: bool) -> list[list[int]]:
    """Indices of the examples grouped by :func:`group_key`, groups in order of first use."""
    groups: dict[Any, list[int]] = {}
    for index, example in enumerate(examples):
        key = group_key(example, reference_free)
        groups.setdefault(key if key is not None else ("alone", index), []).append(index)
    return list(groups.values())


@dataclass
class GroupBatch:
    """Clips (their prefixes, as a :class:`PreparedBatch`) and their candidates' suffixes."""

    prefix: PreparedBatch
    suffix_ids: torch.Tensor  # (N, S) right-padded
    suffix_positions: torch.Tensor  # (3, N, S)
    suffix_lengths: torch.Tensor  # (N,)
    owner: torch.Tensor  # (N,) row of each candidate's clip in ``prefix``
    indices: torch.Tensor  # (N,) positions in the input list
    # The two-level prefix (`levels.py`), on the host: for each prefix row (group), the number of
    # its bundle (groups sharing a video) in this batch and the length of the part of its prefix
    # that every group of its bundle shares (`bundle_cuts`). ``None``: not planned.
    bundle: torch.Tensor | None = None  # (G,)
    shared_lengths: torch.Tensor | None = None  # (G,)

    def pin_memory(self) -> GroupBatch:
        return GroupBatch(
            prefix=self.prefix.pin_memory(),
            suffix_ids=self.suffix_ids.pin_memory(),
            suffix_positions=self.suffix_positions.pin_memory(),
            suffix_lengths=self.suffix_lengths.pin_memory(),
            owner=self.owner.pin_memory(),
            indices=self.indices,
            bundle=self.bundle,
            shared_lengths=self.shared_lengths,
        )

    def to(self, device: torch.device) -> GroupBatch:
        nb = device.type == "cuda"
        return GroupBatch(
            prefix=self.prefix.to(device),
            suffix_ids=self.suffix_ids.to(device, non_blocking=nb),
            suffix_positions=self.suffix_positions.to(device, non_blocking=nb),
            suffix_lengths=self.suffix_lengths.to(device, non_blocking=nb),
            owner=self.owner.to(device, non_blocking=nb),
            indices=self.indices,
            bundle=self.bundle,
            shared_lengths=self.shared_lengths,
        )


def _pad_suffixes(
    ids: Sequence[torch.Tensor], positions: Sequence[torch.Tensor], pad_id: int, multiple: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
    length = -(-int(lengths.max()) // multiple) * multiple
    out_ids = torch.full((len(ids), length), pad_id, dtype=torch.long)
    out_pos = torch.zeros((3, len(ids), length), dtype=torch.long)
    for row, (x, p) in enumerate(zip(ids, positions, strict=True)):
        n = len(x)
        out_ids[row, :n] = x
        out_pos[:, row, :n] = p
        out_pos[:, row, n:] = p.max() + 1 + torch.arange(length - n)
    return out_ids, out_pos, lengths


def bundle_cuts(
    prefixes: Sequence[Sequence[torch.Tensor]], vision_token_ids: Sequence[int]
) -> tuple[list[int], list[int]]:
    """For the two-level path (`levels.py`): each group's bundle number and the length of the part
    of its prefix that every group of its bundle shares, given the groups' prefix ids bundle by
    bundle. That part is their common prefix (:func:`.loading.common_prefix_length`, one token
    at least left to each): the chat header, the video and the first words of the text, where
    the prompt settings' texts begin to differ (``prompts.py``). A group alone keeps its whole
    prefix in it. Groups whose prefixes differ before the end of the video (no prompt of ours
    does) cannot share it: each becomes a bundle of its own."""
    vision = torch.tensor(list(vision_token_ids), dtype=torch.long)
    numbers: list[int] = []
    cuts: list[int] = []
    for group_prefixes in prefixes:
        cut = common_prefix_length([p.tolist() for p in group_prefixes])
        if len(group_prefixes) > 1 and not any(
            bool(torch.isin(p[cut:], vision).any()) for p in group_prefixes
        ):
            numbers.extend([len(set(numbers))] * len(group_prefixes))
            cuts.extend([cut] * len(group_prefixes))
            continue
        for p in group_prefixes:
            numbers.append(len(set(numbers)))
            cuts.append(len(p))
    return numbers, cuts


def collate_groups(
    bundles: list[list[GroupItem]] | list[GroupItem],
    pad_id: int,
    multiple: int,
    vision_token_ids: Sequence[int] | None = None,
) -> GroupBatch:
    """The workers' collate function of the shared-prefix path (items: bundles of groups). With
    ``vision_token_ids`` (the video and image pads), each bundle's shared part
    (:func:`bundle_cuts`) for the two-level path."""
    lists = [bundle if isinstance(bundle, list) else [bundle] for bundle in bundles]
    items = [item for bundle in lists for item in bundle]
    prefix = collate_samples([item.prefix for item in items], pad_id, multiple)
    ids = [x for item in items for x in item.suffix_ids]
    positions = [p for item in items for p in item.suffix_positions]
    suffix_ids, suffix_positions, lengths = _pad_suffixes(ids, positions, pad_id, multiple)
    owner = torch.tensor(
        [row for row, item in enumerate(items) for _ in item.suffix_ids], dtype=torch.long
    )
    indices = torch.tensor([i for item in items for i in item.indices], dtype=torch.long)
    batch = GroupBatch(prefix, suffix_ids, suffix_positions, lengths, owner, indices)
    if vision_token_ids is not None:
        numbers, cuts = bundle_cuts(
            [[item.prefix.input_ids for item in b] for b in lists], vision_token_ids
        )
        batch.bundle = torch.tensor(numbers, dtype=torch.long)
        batch.shared_lengths = torch.tensor(cuts, dtype=torch.long)
    return batch


def merge_group_batches(batches: Sequence[GroupBatch], pad_id: int) -> GroupBatch:
    """Concatenate group batches (already on their device) into one."""
    if len(batches) == 1:
        return batches[0]
    prefix = merge_batches([b.prefix for b in batches], pad_id)
    length = max(int(b.suffix_ids.shape[1]) for b in batches)
    ids, positions, owners, bundles = [], [], [], []
    offset = bundle_offset = 0
    for b in batches:
        extra = length - int(b.suffix_ids.shape[1])
        ids.append(F.pad(b.suffix_ids, (0, extra), value=pad_id))
        if extra:
            tail = b.suffix_positions.amax(dim=2, keepdim=True) + 1
            steps = torch.arange(extra, device=tail.device).view(1, 1, -1)
            positions.append(torch.cat([b.suffix_positions, tail + steps], dim=2))
        else:
            positions.append(b.suffix_positions)
        owners.append(b.owner + offset)
        offset += len(b.prefix.lengths)
        if b.bundle is not None:
            bundles.append(b.bundle + bundle_offset)
            bundle_offset += int(b.bundle.max()) + 1
    planned = len(bundles) == len(batches)
    return GroupBatch(
        prefix=prefix,
        suffix_ids=torch.cat(ids),
        suffix_positions=torch.cat(positions, dim=1),
        suffix_lengths=torch.cat([b.suffix_lengths for b in batches]),
        owner=torch.cat(owners),
        indices=torch.cat([b.indices for b in batches]),
        bundle=torch.cat(bundles) if planned else None,
        shared_lengths=torch.cat([b.shared_lengths for b in batches])  # type: ignore[misc]
        if planned
        else None,
    )


def cache_classes() -> tuple[type, type]:
    """The recording cache (prefix pass) and the shared-prefix cache (suffix pass); defined here
    on first use so that transformers is imported only when the engine runs."""
    from transformers import DynamicCache

    class RecordingCache(DynamicCache):
        """Keeps every layer's keys and values of the prefix pass (no copy, no growth)."""

        def __init__(self, config: Any):
            super().__init__(config=config)
            self.recorded: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

        def update(  # type: ignore[override]
            self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *a, **k
        ) -> tuple[torch.Tensor, torch.Tensor]:
            self.recorded[layer_idx] = (key_states, value_states)
            return key_states, value_states

    class SharedPrefixCache(DynamicCache):
        """Each row sees its clip's prefix keys/values, then its own suffix's; ``owner``: the
        clip of each candidate row, or ``None`` when the rows are the clips (packed suffixes)."""

        def __init__(
            self,
            config: Any,
            prefix: dict[int, tuple[torch.Tensor, torch.Tensor]],
            owner: Any,
            record: bool = False,
        ):
            super().__init__(config=config)
            self.prefix = prefix
            self.owner = owner
            # ``record``: keep every layer's prefix + new keys/values (the two-level path's
            # second level, whose cache the candidates then read)
            self.recorded: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = (
                {} if record else None
            )

        def update(  # type: ignore[override]
            self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *a, **k
        ) -> tuple[torch.Tensor, torch.Tensor]:
            keys, values = self.prefix[layer_idx]
            if self.owner is not None:  # one row per candidate: its clip's prefix, repeated
                keys, values = keys.index_select(0, self.owner), values.index_select(0, self.owner)
            both = (
                torch.cat([keys, key_states], dim=-2),
                torch.cat([values, value_states], dim=-2),
            )
            if self.recorded is not None:
                self.recorded[layer_idx] = both
            return both

    return RecordingCache, SharedPrefixCache


def suffix_attention_mask(
    prefix_lengths: torch.Tensor, owner: torch.Tensor, prefix_width: int, suffix_width: int
) -> torch.Tensor:
    """(N, 1, S, P + S) boolean mask (True = attend): a candidate's suffix token sees its clip's
    real prefix tokens (not the prefix padding) and, causally, its own suffix."""
    device = owner.device
    columns = torch.arange(prefix_width, device=device)
    sees_prefix = columns.view(1, 1, -1) < prefix_lengths.index_select(0, owner).view(-1, 1, 1)
    rows = torch.arange(suffix_width, device=device)
    causal = rows.view(1, -1, 1) >= rows.view(1, 1, -1)
    n = len(owner)
    mask = torch.cat(
        [
            sees_prefix.expand(n, suffix_width, prefix_width),
            causal.expand(n, suffix_width, suffix_width),
        ],
        dim=-1,
    )
    return mask.unsqueeze(1)


@dataclass
class PackedSuffixes:
    """The candidates' suffixes packed one row per clip (:func:`pack_suffixes`)."""

    ids: torch.Tensor  # (G, L)
    positions: torch.Tensor  # (3, G, L)
    mask: torch.Tensor  # (G, 1, L, P + L) True = attend
    last: torch.Tensor  # (N,) flat index (row * L + column) of each candidate's last token
    offset: torch.Tensor  # (N,) the column of each candidate's first token in its row


def pack_suffixes(
    suffix_ids: torch.Tensor,
    suffix_positions: torch.Tensor,
    suffix_lengths: torch.Tensor,
    owner: torch.Tensor,
    prefix_lengths: torch.Tensor,
    prefix_width: int,
    pad_id: int,
    prefix_visible: torch.Tensor | None = None,
) -> PackedSuffixes:
    """The suffixes of a clip's candidates side by side in one row (issue 29): the row attends to
    its clip's prefix cache as it is, instead of one copy of that cache per candidate (the
    repeated rows of :func:`suffix_attention_mask`, whose copies took a third of the GPU's time
    on VATEX-EVAL). Each token keeps its own M-RoPE position; the mask lets it see its clip's
    real prefix tokens and, causally, its own candidate's tokens only, so every candidate's
    hidden states are those of its own sequence. Slots between or after the candidates see the
    prefix only (never an empty row). ``prefix_visible`` (N, P): the prefix columns each candidate
    sees, where that is not simply its row's first ``prefix_lengths`` (the two-level path: its
    clip's shared part and its own setting's part only, `levels.py`)."""
    device = suffix_ids.device
    n, width = suffix_ids.shape
    rows = int(prefix_lengths.shape[0])
    lengths = suffix_lengths.to(device)
    before = torch.cumsum(lengths, 0) - lengths  # tokens of the candidates before each one
    first = torch.full((rows,), n * width, dtype=before.dtype, device=device)
    first = first.scatter_reduce(0, owner, before, reduce="amin")
    offset = before - first.index_select(0, owner)  # where a candidate starts in its row
    length = int((offset + lengths).max())
    column = torch.arange(width, device=device).view(1, -1)
    valid = column < lengths.view(-1, 1)
    target = (owner.view(-1, 1) * length + offset.view(-1, 1) + column)[valid]
    ids = torch.full((rows * length,), pad_id, dtype=suffix_ids.dtype, device=device)
    ids[target] = suffix_ids[valid]
    positions = torch.zeros((3, rows * length), dtype=suffix_positions.dtype, device=device)
    positions[:, target] = suffix_positions[:, valid]
    member = torch.full((rows * length,), -1, dtype=torch.long, device=device)
    member[target] = torch.arange(n, device=device).view(-1, 1).expand(n, width)[valid]
    member = member.view(rows, length)
    slots = torch.arange(length, device=device)
    own = (member.unsqueeze(2) == member.unsqueeze(1)) & (member.unsqueeze(1) >= 0)
    causal = slots.view(1, -1, 1) >= slots.view(1, 1, -1)
    sees_prefix = torch.arange(prefix_width, device=device).view(1, 1, -1) < prefix_lengths.to(
        device
    ).view(-1, 1, 1)
    sees_prefix = sees_prefix.expand(rows, length, prefix_width)
    if prefix_visible is not None:  # a candidate's slots: its own columns; the others: the row's
        own_columns = prefix_visible.index_select(0, member.clamp(min=0).view(-1))
        own_columns = own_columns.view(rows, length, prefix_width)
        sees_prefix = torch.where((member >= 0).unsqueeze(-1), own_columns, sees_prefix)
    mask = torch.cat([sees_prefix, own & causal], dim=-1)
    last = owner * length + offset + lengths - 1
    return PackedSuffixes(
        ids=ids.view(rows, length),
        positions=positions.view(3, rows, length),
        mask=mask.unsqueeze(1),
        last=last,
        offset=offset,
    )


def suffix_hidden(
    lm: Any,
    batch: GroupBatch,
    prefix_kv: dict[int, tuple[torch.Tensor, torch.Tensor]],
    *,
    pad_id: int,
    packed: bool = True,
) -> torch.Tensor:
    """The language model ``lm`` over the candidates' suffixes against their clips' prefix
    caches: the final hidden state at each candidate's last token, in candidate order. ``packed``:
    the candidates of a clip side by side in one row (:func:`pack_suffixes`); else one row per
    candidate against a copy of its clip's cache (:func:`suffix_attention_mask`)."""
    _, shared = cache_classes()
    prefix_width = int(batch.prefix.input_ids.shape[1])
    if packed:
        rows = pack_suffixes(
            batch.suffix_ids,
            batch.suffix_positions,
            batch.suffix_lengths,
            batch.owner,
            batch.prefix.lengths,
            prefix_width,
            pad_id,
        )
        ids, positions, mask, owner, last = rows.ids, rows.positions, rows.mask, None, rows.last
    else:
        ids, positions, owner = batch.suffix_ids, batch.suffix_positions, batch.owner
        mask = suffix_attention_mask(batch.prefix.lengths, owner, prefix_width, int(ids.shape[1]))
        rows_at = torch.arange(ids.shape[0], device=ids.device) * ids.shape[1]
        last = rows_at + (batch.suffix_lengths - 1).to(ids.device)
    states = rows_hidden(lm, ids, positions, mask, shared(lm.config, prefix_kv, owner))
    return states.index_select(0, last)


def rows_hidden(
    lm: Any, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any
) -> torch.Tensor:
    """The language model ``lm`` over rows of text tokens (R, L) with their M-RoPE positions
    (3, R, L) and mask (R, 1, L, P + L) against ``cache`` (a prefix of width P): the final hidden
    states, flat (R * L, H)."""
    out = lm(
        inputs_embeds=lm.embed_tokens(ids),
        position_ids=positions,
        attention_mask=mask,
        cache=cache,
        use_cache=True,
    )
    states = out.last_hidden_state
    return states.reshape(-1, states.shape[-1])
