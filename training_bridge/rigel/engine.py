"""Fast batched inference for Rigel: teacher pass and scoring, from MP4 files or frames.

``ScoringEngine`` computes, for each (video, references, candidate), the final hidden state at the
answer position and the LM-head logits of "1".."5" (the teacher pass), and with a head the score
``s = sum_i p_i * i`` normalised to [0, 1] by ``(s - 1) / 4``. It gives the same numbers as
``build_batch`` + ``model(**batch)`` (tests check it on the tiny model), but:

- CPU work (decoding, tokenisation, M-RoPE positions) runs in DataLoader worker processes, batches
  ahead of the GPU, handed over through shared and pinned memory with non-blocking copies;
- resizing, normalisation and the patch layout run on the GPU for the whole batch at once;
- the vision tower attends within each temporal group with one batched SDPA call (all groups of a
  batch have the same size) instead of one call per group;
- sequences are padded on the RIGHT: with causal attention the real tokens never see the pads, so
  no attention mask is needed and SDPA's flash kernel runs; the answer position of each row is its
  last real token (the public ``build_batch`` stays left-padded);
- the M-RoPE positions come precomputed from the workers (no per-sample loop on the GPU stream);
- only the answer position reaches the LM head, and only the five score rows of it;
- **shared prefixes** (``share_prefix=True``, the default): samples with the same video and the
  same references (in VATEX-EVAL every clip has 6 candidates and the same 9 references) share
  everything before the candidate — frames, vision tower output and the prompt up to the
  candidate. Such a clip is decoded once, its vision tower runs once, and the language model reads
  its prefix once and keeps the keys and values of every layer; each candidate's suffix then runs
  against that cache (the cache rows repeated per candidate, the M-RoPE positions continuing the
  prefix's). With causal attention this is the same computation as the whole sequence, row by row
  (tests compare the scores with the per-sample path). Samples alone with their clip take the
  per-sample path.

No Django import.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .backbone import Backbone
from .inputs import RigelExample, encode_text, load_video, mm_token_type_ids, rope_position_ids
from .video import normalize, patchify, resize_uint8, target_size

VISION_ATTENTION = "lepus_flash_uniform"  # contains "flash": HF hands it cu_seqlens
_CHUNK_LENGTH: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "lepus_vision_chunk", default=None
)


def _uniform_chunk_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    scaling: float | None = None,
    dropout: float = 0.0,
    cu_seq_lens_q: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Vision attention within packed chunks. (1, heads, total, d) -> (1, total, heads, d).

    When all chunks have one length (set by the engine, or read off ``cu_seq_lens_q``), the chunks
    become the batch dimension of a single SDPA call; otherwise one call per chunk."""
    _, heads, total, dim = query.shape
    chunk = _CHUNK_LENGTH.get()
    lengths: list[int] | None = None
    if chunk is None or total % chunk:
        if cu_seq_lens_q is None:
            lengths = [total]
        else:
            lengths = (cu_seq_lens_q[1:] - cu_seq_lens_q[:-1]).tolist()
        chunk = lengths[0] if len(set(lengths)) == 1 else None
    if chunk is not None:
        n = total // chunk

        def split(t: torch.Tensor) -> torch.Tensor:
            return t[0].reshape(heads, n, chunk, dim).transpose(0, 1)

        out = F.scaled_dot_product_attention(split(query), split(key), split(value), scale=scaling)
        return out.permute(0, 2, 1, 3).reshape(1, total, heads, dim), None
    outs = []
    start = 0
    for length in lengths or []:
        sl = slice(start, start + length)
        outs.append(
            F.scaled_dot_product_attention(
                query[:, :, sl], key[:, :, sl], value[:, :, sl], scale=scaling
            )
        )
        start += length
    return torch.cat(outs, dim=2).transpose(1, 2), None


def enable_fast_vision_attention(model: Any) -> None:
    """Route the vision tower's attention through :func:`_uniform_chunk_attention`."""
    from transformers import AttentionInterface

    AttentionInterface.register(VISION_ATTENTION, _uniform_chunk_attention)
    model.model.visual.config._attn_implementation = VISION_ATTENTION


# --------------------------------------------------------------------------------------------
# CPU side (runs in DataLoader workers)


@dataclass
class _Item:
    frames: torch.Tensor  # (T, H, W, 3) uint8
    input_ids: torch.Tensor  # (L,)
    positions: torch.Tensor  # (3, L)
    grid: tuple[int, int, int]
    size: tuple[int, int]
    index: int


class _ExampleDataset(torch.utils.data.Dataset):
    def __init__(self, examples: Sequence[RigelExample], backbone: Backbone, reference_free: bool):
        self.examples = examples
        self.reference_free = reference_free
        # What the workers need, without the model.
        self.backbone = _worker_backbone(backbone)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> _Item:
        example = self.examples[index]
        backbone = self.backbone
        video = load_video(example, backbone.vision)
        ids, grid = encode_text(example, video, backbone, reference_free=self.reference_free)
        types = mm_token_type_ids(ids, backbone)
        positions = rope_position_ids(types, grid, backbone.vision.merge_size)
        frames = video.frames
        size = target_size(len(frames), int(frames.shape[1]), int(frames.shape[2]), backbone.vision)
        return _Item(
            frames=torch.from_numpy(np.ascontiguousarray(frames)),
            input_ids=torch.as_tensor(ids, dtype=torch.long),
            positions=torch.from_numpy(positions),
            grid=grid,
            size=size,
            index=index,
        )


# Environment the decoding workers start with: one thread per library in each worker (the workers
# are the parallelism). OpenCV's decoder threads are set per capture (video._open_capture): its
# default of one thread per core in each of 15 workers made the earlier single-process runs on the
# GPU machine crawl; with one thread per capture they ran at full speed (docs/benchmarks.md).
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OPENCV_FFMPEG_CAPTURE_OPTIONS": "threads;1",
    "TOKENIZERS_PARALLELISM": "false",
}


@contextlib.contextmanager
def _worker_environment() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in WORKER_ENV}
    os.environ.update(WORKER_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _worker_init(worker_id: int) -> None:
    """One decoding thread per worker process (the workers are the parallelism)."""
    os.environ.update(WORKER_ENV)
    torch.set_num_threads(1)
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:
        pass


def _mp_context(name: str) -> Any:
    """The workers' multiprocessing context (``ScoringEngine(mp_context=...)``).

    ``fork`` (the default): workers start in well under a second (measured on the H200 machine:
    first batch after 0.7 s). Each worker runs with one thread per library (``_worker_init``) and
    OpenCV decodes with one thread per capture (``video._open_capture``); the parent should not
    have used OpenCV's or OpenMP's thread pools (benchmarks set ``OMP_NUM_THREADS=1``, as torchrun
    does). ``forkserver``: workers start from a clean server that preloads the modules below —
    immune to thread pools inherited from the parent, but each worker unpickles the dataset (the
    tokenizer) and re-imports the main module: about 10 s per loader on the H200 machine."""
    import multiprocessing

    context = multiprocessing.get_context(name)
    if name == "forkserver":
        context.set_forkserver_preload(
            [
                "torch",
                "numpy",
                "cv2",
                "transformers.tokenization_utils_tokenizers",  # the unpickled tokenizer's class
                "training_bridge.rigel.engine",
            ]
        )
    return context


def _worker_backbone(backbone: Backbone) -> Backbone:
    """What the workers need of the backbone: tokenizer, settings and ids, the model's config
    only, and none of ``extra`` (which may hold a PeftModel: its weights must not be pickled)."""
    return Backbone(**{**backbone.__dict__, "model": _ConfigOnly(backbone.model), "extra": {}})


class _ConfigOnly:
    """Stands in for the model inside workers (only its config is read there)."""

    def __init__(self, model: Any):
        self.config = model.config


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
                index = torch.tensor([k for _, k in picked], device=self.frames[g].device)
                frames.append(self.frames[g].index_select(0, index))
                groups.append([new for new, _ in picked])
                sizes.append(self.sizes[g])
        index = torch.tensor(rows, dtype=torch.long)
        on = self.input_ids.device
        return PreparedBatch(
            frames=frames,
            groups=groups,
            sizes=sizes,
            input_ids=self.input_ids.index_select(0, index.to(on)),
            positions=self.positions.index_select(1, index.to(on)),
            lengths=self.lengths.index_select(0, index.to(self.lengths.device)),
            grids=self.grids.index_select(0, index.to(self.grids.device)),
            indices=self.indices.index_select(0, index.to(self.indices.device)),
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


def _collate(items: list[_Item], pad_id: int, multiple: int) -> PreparedBatch:
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


# --------------------------------------------------------------------------------------------
# Shared prefixes: one clip, several candidates


def group_key(example: RigelExample, reference_free: bool) -> tuple[Any, ...] | None:
    """What must be equal for two samples to share their prompt prefix: the same video (file,
    frames directory/list or the same frames array object), the same frame instants, and the same
    references (none in the reference-free prompt). ``None``: the example cannot be grouped."""
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
    references = () if reference_free else tuple(example.references)
    return (
        video,
        references,
        example.fps,
        tuple(example.frame_indices) if example.frame_indices is not None else None,
        tuple(example.frame_times) if example.frame_times is not None else None,
    )


def plan_groups(examples: Sequence[RigelExample], reference_free: bool) -> list[list[int]]:
    """Indices of the examples grouped by :func:`group_key`, groups in order of first use."""
    groups: dict[Any, list[int]] = {}
    for index, example in enumerate(examples):
        key = group_key(example, reference_free)
        groups.setdefault(key if key is not None else ("alone", index), []).append(index)
    return list(groups.values())


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix, leaving at least one token in every sequence (the
    answer position must be in each candidate's suffix)."""
    shortest = min(len(s) for s in sequences)
    length = 0
    first = sequences[0]
    while length < shortest - 1 and all(s[length] == first[length] for s in sequences[1:]):
        length += 1
    return length


@dataclass
class _GroupItem:
    prefix: _Item  # frames, prefix ids and positions, grid, size; index = group number
    suffix_ids: list[torch.Tensor]  # per candidate (S_k,)
    suffix_positions: list[torch.Tensor]  # per candidate (3, S_k), continuing the prefix's
    indices: list[int]  # the candidates' positions in the input list


class _GroupDataset(torch.utils.data.Dataset):
    """One item per clip group: decoded once, every candidate tokenised, the common prefix cut."""

    def __init__(
        self,
        examples: Sequence[RigelExample],
        groups: Sequence[Sequence[int]],
        backbone: Backbone,
        reference_free: bool,
    ):
        self.examples = examples
        self.groups = [list(g) for g in groups]
        self.reference_free = reference_free
        self.backbone = _worker_backbone(backbone)

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, number: int) -> _GroupItem:
        backbone = self.backbone
        rows = self.groups[number]
        video = load_video(self.examples[rows[0]], backbone.vision)
        sequences: list[list[int]] = []
        grid: tuple[int, int, int] | None = None
        for row in rows:
            ids, grid = encode_text(
                self.examples[row], video, backbone, reference_free=self.reference_free
            )
            sequences.append(ids)
        assert grid is not None
        cut = common_prefix_length(sequences)
        merge = backbone.vision.merge_size
        suffix_ids, suffix_positions = [], []
        prefix_positions: np.ndarray | None = None
        for ids in sequences:
            types = mm_token_type_ids(ids, backbone)
            if types[cut:].any():
                raise ValueError("a candidate's suffix holds video tokens")
            positions = rope_position_ids(types, grid, merge)
            if prefix_positions is None:
                prefix_positions = positions[:, :cut]
            suffix_ids.append(torch.as_tensor(ids[cut:], dtype=torch.long))
            suffix_positions.append(torch.from_numpy(np.ascontiguousarray(positions[:, cut:])))
        assert prefix_positions is not None
        frames = video.frames
        size = target_size(len(frames), int(frames.shape[1]), int(frames.shape[2]), backbone.vision)
        prefix = _Item(
            frames=torch.from_numpy(np.ascontiguousarray(frames)),
            input_ids=torch.as_tensor(sequences[0][:cut], dtype=torch.long),
            positions=torch.from_numpy(np.ascontiguousarray(prefix_positions)),
            grid=grid,
            size=size,
            index=number,
        )
        return _GroupItem(prefix, suffix_ids, suffix_positions, list(rows))


@dataclass
class GroupBatch:
    """Clips (their prefixes, as a :class:`PreparedBatch`) and their candidates' suffixes."""

    prefix: PreparedBatch
    suffix_ids: torch.Tensor  # (N, S) right-padded
    suffix_positions: torch.Tensor  # (3, N, S)
    suffix_lengths: torch.Tensor  # (N,)
    owner: torch.Tensor  # (N,) row of each candidate's clip in ``prefix``
    indices: torch.Tensor  # (N,) positions in the input list

    def pin_memory(self) -> GroupBatch:
        return GroupBatch(
            prefix=self.prefix.pin_memory(),
            suffix_ids=self.suffix_ids.pin_memory(),
            suffix_positions=self.suffix_positions.pin_memory(),
            suffix_lengths=self.suffix_lengths.pin_memory(),
            owner=self.owner.pin_memory(),
            indices=self.indices,
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


def _collate_groups(items: list[_GroupItem], pad_id: int, multiple: int) -> GroupBatch:
    prefix = _collate([item.prefix for item in items], pad_id, multiple)
    ids = [x for item in items for x in item.suffix_ids]
    positions = [p for item in items for p in item.suffix_positions]
    suffix_ids, suffix_positions, lengths = _pad_suffixes(ids, positions, pad_id, multiple)
    owner = torch.tensor(
        [row for row, item in enumerate(items) for _ in item.suffix_ids], dtype=torch.long
    )
    indices = torch.tensor([i for item in items for i in item.indices], dtype=torch.long)
    return GroupBatch(prefix, suffix_ids, suffix_positions, lengths, owner, indices)


def merge_group_batches(batches: Sequence[GroupBatch], pad_id: int) -> GroupBatch:
    """Concatenate group batches (already on their device) into one."""
    if len(batches) == 1:
        return batches[0]
    prefix = merge_batches([b.prefix for b in batches], pad_id)
    length = max(int(b.suffix_ids.shape[1]) for b in batches)
    ids, positions, owners = [], [], []
    offset = 0
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
    return GroupBatch(
        prefix=prefix,
        suffix_ids=torch.cat(ids),
        suffix_positions=torch.cat(positions, dim=1),
        suffix_lengths=torch.cat([b.suffix_lengths for b in batches]),
        owner=torch.cat(owners),
        indices=torch.cat([b.indices for b in batches]),
    )


def _cache_classes() -> tuple[type, type]:
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
        """Each candidate row sees its clip's prefix keys/values, then its own suffix's."""

        def __init__(
            self, config: Any, prefix: dict[int, tuple[torch.Tensor, torch.Tensor]], owner: Any
        ):
            super().__init__(config=config)
            self.prefix = prefix
            self.owner = owner

        def update(  # type: ignore[override]
            self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *a, **k
        ) -> tuple[torch.Tensor, torch.Tensor]:
            keys, values = self.prefix[layer_idx]
            return (
                torch.cat([keys.index_select(0, self.owner), key_states], dim=-2),
                torch.cat([values.index_select(0, self.owner), value_states], dim=-2),
            )

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


class VisionCache:
    """Least-recently-used cache of per-clip vision features (on the device), bounded in clips."""

    def __init__(self, max_clips: int = 2048):
        from collections import OrderedDict

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


# --------------------------------------------------------------------------------------------
# The engine


@dataclass
class EngineOutput:
    hidden: np.ndarray  # (N, hidden) float32, final hidden state at the answer position
    score_logits: np.ndarray  # (N, 5) float32, LM-head logits of "1".."5"
    head_logits: np.ndarray | None = None  # (N, 5) from the scoring head, if any
    scores: np.ndarray | None = None  # (N,) in [0, 1]
    stats: dict[str, Any] = field(default_factory=dict)


def expected_score(logits: torch.Tensor) -> torch.Tensor:
    """(B, 5) logits -> sum_i p_i * i normalised to [0, 1] by (s - 1) / 4."""
    probs = logits.float().softmax(-1)
    levels = torch.arange(1, 6, device=logits.device, dtype=probs.dtype)
    return ((probs * levels).sum(-1) - 1.0) / 4.0


class ScoringEngine:
    """Batched teacher pass / scoring on one device (one rank under torchrun)."""

    def __init__(
        self,
        backbone: Backbone,
        head: Callable[[torch.Tensor], torch.Tensor] | None = None,
        *,
        batch_size: int = 64,
        reference_free: bool = False,
        num_workers: int | None = None,
        loader_batch: int = 8,
        prefetch_factor: int = 2,
        pad_multiple: int = 8,
        fast_vision: bool = True,
        linear_patch_embed: bool = True,
        fuse_elementwise: bool = False,
        mp_context: str = "fork",
        share_prefix: bool = True,
        group_loader_batch: int = 2,
        compile_layers: bool = False,
    ):
        self.backbone = backbone
        self.head = head
        self.batch_size = batch_size
        self.reference_free = reference_free
        if num_workers is None:
            num_workers = max(0, min(16, (os.cpu_count() or 1) - 1))
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pad_multiple = pad_multiple
        self.loader_batch = max(1, min(loader_batch, batch_size))
        self.mp_context = mp_context
        self.share_prefix = share_prefix
        self.group_loader_batch = max(1, group_loader_batch)
        if linear_patch_embed or fuse_elementwise:
            from . import fused

            if linear_patch_embed:
                fused.linear_patch_embed()
            if fuse_elementwise:
                fused.fuse_elementwise()
        self.fuse_elementwise = fuse_elementwise
        self.device = torch.device(backbone.device)
        model = backbone.model
        if fast_vision:
            enable_fast_vision_attention(model)
        self.fast_vision = fast_vision
        # Each decoder layer of the language model compiled (fused.compile_decoder_layers): the
        # per-sample path only; the shared-prefix path, which passes a KV cache through the
        # layers, runs them eagerly.
        self.compile_layers = compile_layers
        if compile_layers:
            from . import fused

            fused.compile_decoder_layers(model.model.language_model, hint=fused.ENGINE_HINT)
        lm_head = model.lm_head.weight
        self.score_rows = lm_head[backbone.score_token_ids].detach()  # (5, H)
        if isinstance(head, torch.nn.Module):
            head.to(self.device).eval()

    # -- public API ---------------------------------------------------------------------------

    def score_videos(
        self,
        paths: Sequence[str | os.PathLike],
        references: Sequence[Sequence[str]],
        candidates: Sequence[str],
    ) -> np.ndarray:
        """Scores in [0, 1] (with the head; the LM-head digits when the engine has none)."""
        if not (len(paths) == len(references) == len(candidates)):
            raise ValueError("paths, references and candidates must have the same length")
        examples = [
            RigelExample(references=list(refs), candidate=cand, video_path=path)
            for path, refs, cand in zip(paths, references, candidates, strict=True)
        ]
        out = self.run(examples)
        assert out.scores is not None
        return out.scores

    def run(self, examples: Sequence[RigelExample]) -> EngineOutput:
        """Teacher outputs (and scores) of every example, in input order. Samples that share a
        clip and references go through the shared-prefix path (``share_prefix``), the others
        through the per-sample path."""
        n = len(examples)
        hidden = np.zeros((n, self.backbone.hidden_size), dtype=np.float32)
        score_logits = np.zeros((n, 5), dtype=np.float32)
        head_logits = np.zeros((n, 5), dtype=np.float32) if self.head is not None else None
        stats: dict[str, Any] = {
            "batches": 0,
            "tokens": 0,
            "video_tokens": 0,
            "patches": 0,
            "shared_samples": 0,
            "shared_clips": 0,
            "prefix_tokens": 0,
            "suffix_tokens": 0,
        }
        started = time.perf_counter()
        first_batch: float | None = None

        def store(rows: np.ndarray, h: torch.Tensor, s: torch.Tensor, hl: Any) -> None:
            hidden[rows] = h.float().cpu().numpy()
            score_logits[rows] = s.float().cpu().numpy()
            if head_logits is not None and hl is not None:
                head_logits[rows] = hl.float().cpu().numpy()

        if self.share_prefix:
            groups = plan_groups(examples, self.reference_free)
        else:
            groups = [[i] for i in range(n)]
        single = np.array([g[0] for g in groups if len(g) == 1], dtype=np.int64)
        shared = [g for g in groups if len(g) > 1]
        if len(single):
            subset = [examples[i] for i in single]
            for batch in self.device_batches(subset):
                if first_batch is None:
                    first_batch = time.perf_counter() - started
                h, s, hl = self.forward_batch(batch)
                store(single[batch.indices.numpy()], h, s, hl)
                stats["batches"] += 1
                stats["tokens"] += int(batch.lengths.sum())
                patches = int(batch.grids.prod(-1).sum())
                stats["patches"] += patches
                stats["video_tokens"] += patches // self.backbone.vision.merge_size**2
        if shared:
            with self._eager_layers():
                self._run_groups(examples, shared, stats, store, started)
        stats["seconds"] = time.perf_counter() - started
        group_first = stats.pop("first_group_batch_seconds", None)
        stats["first_batch_seconds"] = first_batch if first_batch is not None else group_first
        logits = torch.from_numpy(head_logits if head_logits is not None else score_logits)
        scores = expected_score(logits).numpy()
        return EngineOutput(hidden, score_logits, head_logits, scores, stats)

    def close(self) -> None:
        """Undo what this engine changed beyond itself: its compiled decoder layers, and, where it
        fused the element-wise ops, the process-wide patches of transformers' Qwen3-VL modules
        (`fused.restore`, the linear patch embedding included). The engine runs eagerly and
        unfused afterwards; a later engine patches again."""
        from . import fused

        if self.compile_layers:
            fused.uncompile_decoder_layers(self.backbone.model.model.language_model)
            self.compile_layers = False
        if self.fuse_elementwise:
            fused.restore()
            self.fuse_elementwise = False

    @contextlib.contextmanager
    def _eager_layers(self) -> Iterator[None]:
        if not self.compile_layers:
            yield
            return
        from . import fused

        language_model = self.backbone.model.model.language_model
        fused.uncompile_decoder_layers(language_model)
        try:
            yield
        finally:
            fused.compile_decoder_layers(language_model, hint=fused.ENGINE_HINT)

    def _run_groups(
        self,
        examples: Sequence[RigelExample],
        shared: list[list[int]],
        stats: dict[str, Any],
        store: Callable[..., None],
        started: float,
    ) -> None:
        """The shared-prefix path of :meth:`run` (its statistics added to ``stats``)."""
        for gb in self.group_device_batches(examples, shared):
            stats.setdefault("first_group_batch_seconds", time.perf_counter() - started)
            h, s, hl = self.forward_groups(gb)
            store(gb.indices.numpy(), h, s, hl)
            prefix_tokens = int(gb.prefix.lengths.sum())
            suffix_tokens = int(gb.suffix_lengths.sum())
            stats["batches"] += 1
            stats["shared_samples"] += len(gb.indices)
            stats["shared_clips"] += len(gb.prefix.lengths)
            stats["prefix_tokens"] += prefix_tokens
            stats["suffix_tokens"] += suffix_tokens
            stats["tokens"] += prefix_tokens + suffix_tokens
            patches = int(gb.prefix.grids.prod(-1).sum())
            stats["patches"] += patches
            stats["video_tokens"] += patches // self.backbone.vision.merge_size**2

    def group_device_batches(
        self, examples: Sequence[RigelExample], groups: Sequence[Sequence[int]]
    ) -> Iterator[GroupBatch]:
        """Batches of about ``batch_size`` candidates (whole clips) on the device."""
        pending: list[GroupBatch] = []
        count = 0
        for sub in self.prepared_groups(examples, groups):
            pending.append(sub.to(self.device))
            count += len(sub.indices)
            if count >= self.batch_size:
                yield merge_group_batches(pending, self.backbone.pad_token_id)
                pending, count = [], 0
        if pending:
            yield merge_group_batches(pending, self.backbone.pad_token_id)

    def prepared_groups(
        self, examples: Sequence[RigelExample], groups: Sequence[Sequence[int]]
    ) -> Iterator[GroupBatch]:
        """Group batches of ``group_loader_batch`` clips prepared by the workers, in order."""
        dataset = _GroupDataset(examples, groups, self.backbone, self.reference_free)
        collate = functools.partial(
            _collate_groups, pad_id=self.backbone.pad_token_id, multiple=self.pad_multiple
        )
        loader = self._loader(dataset, collate, self.group_loader_batch)
        with _worker_environment():
            iterator = iter(loader)
        yield from iterator

    def device_batches(self, examples: Sequence[RigelExample]) -> Iterator[PreparedBatch]:
        """Batches of ``batch_size`` on the device, merged from the workers' smaller batches
        (small worker batches keep the shared/pinned memory in flight small)."""
        pending: list[PreparedBatch] = []
        count = 0
        for sub in self.prepared_batches(examples):
            pending.append(sub.to(self.device))
            count += len(sub.indices)
            if count >= self.batch_size:
                yield merge_batches(pending, self.backbone.pad_token_id)
                pending, count = [], 0
        if pending:
            yield merge_batches(pending, self.backbone.pad_token_id)

    def prepared_batches(
        self,
        examples: Sequence[RigelExample],
        batch_sampler: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[PreparedBatch]:
        """Batches of ``loader_batch`` prepared by the workers (pinned), in input order; or, with
        ``batch_sampler``, exactly those batches of example positions, in that order."""
        dataset = _ExampleDataset(examples, self.backbone, self.reference_free)
        collate = functools.partial(
            _collate, pad_id=self.backbone.pad_token_id, multiple=self.pad_multiple
        )
        loader = self._loader(dataset, collate, self.loader_batch, batch_sampler)
        with _worker_environment():  # the workers (and a fork server) start here
            iterator = iter(loader)
        yield from iterator

    def _loader(
        self,
        dataset: torch.utils.data.Dataset,
        collate: Callable[[list[Any]], Any],
        batch: int,
        batch_sampler: Sequence[Sequence[int]] | None = None,
    ) -> torch.utils.data.DataLoader:
        workers = self.num_workers
        sizing: dict[str, Any] = (
            {"batch_sampler": [list(b) for b in batch_sampler]}
            if batch_sampler is not None
            else {"batch_size": batch, "shuffle": False}
        )
        return torch.utils.data.DataLoader(
            dataset,
            **sizing,
            num_workers=workers,
            collate_fn=collate,
            pin_memory=self.device.type == "cuda",
            prefetch_factor=self.prefetch_factor if workers > 0 else None,
            persistent_workers=False,
            multiprocessing_context=_mp_context(self.mp_context) if workers > 0 else None,
            worker_init_fn=_worker_init if workers > 0 else None,
        )

    # -- GPU side -----------------------------------------------------------------------------

    @torch.inference_mode()
    def forward_batch(
        self, batch: PreparedBatch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(hidden (B, H), LM-head score logits (B, 5), head logits (B, 5) or None)."""
        batch = batch.to(self.device)
        pixel_values, grid_thw = self.pixels(batch)
        hidden = self.answer_hidden(batch, pixel_values, grid_thw)
        score_logits = hidden.float() @ self.score_rows.float().T
        head_logits = self.head(hidden.float()) if self.head is not None else None
        return hidden, score_logits, head_logits

    @torch.inference_mode()
    def forward_groups(
        self, batch: GroupBatch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Shared-prefix forward: vision tower and prefix once per clip, suffixes per candidate.
        Returns the same triple as :meth:`forward_batch`, one row per candidate."""
        batch = batch.to(self.device)
        pixel_values, grid_thw = self.pixels(batch.prefix)
        embeds, deepstack = self.vision_features(pixel_values, grid_thw, batch.prefix.grids)
        prefix_kv = self.prefix_cache(batch.prefix, embeds, deepstack)
        hidden = self.suffix_hidden(batch, prefix_kv)
        score_logits = hidden.float() @ self.score_rows.float().T
        head_logits = self.head(hidden.float()) if self.head is not None else None
        return hidden, score_logits, head_logits

    def prefix_cache(
        self, prefix: PreparedBatch, video_embeds: torch.Tensor, deepstack: list[torch.Tensor]
    ) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Keys and values of every layer for the clips' prefixes (right-padded, causal)."""
        recording, _ = _cache_classes()
        lm = self.backbone.model.model.language_model
        ids = prefix.input_ids
        inputs_embeds = lm.embed_tokens(ids)
        mask = ids == self.backbone.video_token_id
        inputs_embeds = inputs_embeds.masked_scatter(
            mask.unsqueeze(-1), video_embeds.to(inputs_embeds.dtype)
        )
        cache = recording(lm.config)
        lm(
            inputs_embeds=inputs_embeds,
            position_ids=prefix.positions,
            attention_mask=None,
            visual_pos_masks=mask,
            deepstack_visual_embeds=[d.to(inputs_embeds.dtype) for d in deepstack],
            cache=cache,
            use_cache=True,
        )
        return cache.recorded

    def suffix_hidden(
        self, batch: GroupBatch, prefix_kv: dict[int, tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """Final hidden state at each candidate's last suffix token, against its clip's cache."""
        _, shared = _cache_classes()
        lm = self.backbone.model.model.language_model
        ids = batch.suffix_ids
        owner = batch.owner
        mask = suffix_attention_mask(
            batch.prefix.lengths, owner, int(batch.prefix.input_ids.shape[1]), int(ids.shape[1])
        )
        out = lm(
            inputs_embeds=lm.embed_tokens(ids),
            position_ids=batch.suffix_positions,
            attention_mask=mask,
            cache=shared(lm.config, prefix_kv, owner),
            use_cache=True,
        )
        last = (batch.suffix_lengths - 1).to(ids.device)
        return out.last_hidden_state[torch.arange(ids.shape[0], device=ids.device), last]

    def pixels(self, batch: PreparedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """GPU preprocessing: (sum of patches, C·tp·p·p) in batch row order, and grid_thw."""
        vision = self.backbone.vision
        dtype = self.backbone.model.model.visual.dtype
        rows: list[int] = []
        parts: list[torch.Tensor] = []
        for frames, group, size in zip(batch.frames, batch.groups, batch.sizes, strict=True):
            clips = frames.permute(0, 1, 4, 2, 3)  # (B, T, 3, H, W)
            values, _ = patchify(normalize(resize_uint8(clips, size), vision), vision)
            parts.append(values.to(dtype))
            rows.extend(group)
        if len(parts) == 1 and batch.groups[0] == list(range(len(batch.groups[0]))):
            pixel_values = parts[0].reshape(-1, parts[0].shape[-1])
        else:  # restore batch order across shape groups
            per_row: dict[int, torch.Tensor] = {}
            for values, group in zip(parts, batch.groups, strict=True):
                for k, row in enumerate(group):
                    per_row[row] = values[k]
            pixel_values = torch.cat([per_row[r] for r in range(len(per_row))], dim=0)
        return pixel_values, batch.grids.to(self.device)

    def vision_features(
        self, pixel_values: torch.Tensor, grid_thw: torch.Tensor, grids_cpu: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Merged video embeddings (tokens, H) and the DeepStack features, for the whole batch."""
        visual = self.backbone.model.model.visual
        chunks = (grids_cpu[:, 1] * grids_cpu[:, 2]).unique()
        token = _CHUNK_LENGTH.set(int(chunks[0]) if len(chunks) == 1 else None)
        try:
            out = visual(pixel_values, grid_thw=grid_thw, return_dict=True)
        finally:
            _CHUNK_LENGTH.reset(token)
        return out.pooler_output, list(out.deepstack_features)

    def cached_vision_features(
        self, batch: PreparedBatch, keys: Sequence[Any], cache: VisionCache
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The batch's merged video embeddings and DeepStack features, the vision tower running
        only on clips not yet in ``cache`` (keyed by ``keys``, one per row). The tower is frozen
        (Phase 2 trains LoRA on the language model only), so its features are constants."""
        missing: dict[Any, int] = {}
        for row, key in enumerate(keys):
            if key not in cache and key not in missing:
                missing[key] = row
        if missing:
            with torch.no_grad():
                sub = batch.select(list(missing.values()))
                pixel_values, grid_thw = self.pixels(sub)
                embeds, deepstack = self.vision_features(pixel_values, grid_thw, sub.grids)
            tokens = (sub.grids.prod(-1) // self.backbone.vision.merge_size**2).tolist()
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

    def answer_hidden(
        self, batch: PreparedBatch, pixel_values: torch.Tensor, grid_thw: torch.Tensor
    ) -> torch.Tensor:
        embeds, deepstack = self.vision_features(pixel_values, grid_thw, batch.grids)
        return self.language_hidden(batch, embeds, deepstack)

    def language_hidden(
        self, batch: PreparedBatch, video_embeds: torch.Tensor, deepstack: list[torch.Tensor]
    ) -> torch.Tensor:
        """Final hidden state at each row's last real token (right padding, causal, no mask)."""
        lm = self.backbone.model.model.language_model
        ids = batch.input_ids
        inputs_embeds = lm.embed_tokens(ids)
        mask = ids == self.backbone.video_token_id
        inputs_embeds = inputs_embeds.masked_scatter(
            mask.unsqueeze(-1), video_embeds.to(inputs_embeds.dtype)
        )
        out = lm(
            inputs_embeds=inputs_embeds,
            position_ids=batch.positions,
            attention_mask=None,
            visual_pos_masks=mask,
            deepstack_visual_embeds=[d.to(inputs_embeds.dtype) for d in deepstack],
            use_cache=False,
        )
        last = (batch.lengths - 1).to(ids.device)
        return out.last_hidden_state[torch.arange(ids.shape[0], device=ids.device), last]


# --------------------------------------------------------------------------------------------
# Accounting


def forward_flops(
    config: Any, *, seq_len: float, patches: float, chunk: float, causal: bool = True
) -> dict[str, float]:
    """Matmul FLOPs of one forward of one sample (2 per multiply-add), split by part."""
    t = config.text_config
    v = config.vision_config
    head_dim = t.head_dim
    q = t.num_attention_heads * head_dim
    kv = t.num_key_value_heads * head_dim
    per_token = 2 * (
        t.hidden_size * (q + 2 * kv) + q * t.hidden_size + 3 * t.hidden_size * t.intermediate_size
    )
    lm_linear = per_token * t.num_hidden_layers * seq_len
    pairs = seq_len * (seq_len + 1) / 2 if causal else seq_len * seq_len
    lm_attention = 4 * q * pairs * t.num_hidden_layers
    d, inter = v.hidden_size, v.intermediate_size
    in_dim = v.in_channels * v.temporal_patch_size * v.patch_size**2
    vis_linear = patches * (2 * in_dim * d + v.depth * 2 * (4 * d * d + 2 * d * inter))
    vis_attention = 4 * d * chunk * patches * v.depth  # chunks * chunk^2 = patches * chunk
    merged = patches / v.spatial_merge_size**2
    wide = d * v.spatial_merge_size**2
    mergers = (
        (1 + len(v.deepstack_visual_indexes))
        * merged
        * 2
        * (wide * wide + wide * v.out_hidden_size)
    )
    return {
        "lm_linear": lm_linear,
        "lm_attention": lm_attention,
        "vision_linear": vis_linear,
        "vision_attention": vis_attention,
        "mergers": mergers,
        "total": lm_linear + lm_attention + vis_linear + vis_attention + mergers,
    }


def shared_prefix_flops(
    config: Any,
    *,
    prefix_lengths: Sequence[int],
    suffix_lengths: Sequence[int],
    owner: Sequence[int],
    patches: float,
    chunk: float,
) -> dict[str, float]:
    """Matmul FLOPs of one shared-prefix batch (2 per multiply-add), real tokens only: the vision
    tower on every clip (``patches`` per clip), the language model on every prefix once and on
    every candidate's suffix, whose tokens attend to their clip's prefix and causally to their
    own suffix."""
    t = config.text_config
    clips = len(prefix_lengths)
    per_clip = forward_flops(config, seq_len=0, patches=patches, chunk=chunk)
    q = t.num_attention_heads * t.head_dim
    kv = t.num_key_value_heads * t.head_dim
    per_token = 2 * (
        t.hidden_size * (q + 2 * kv) + q * t.hidden_size + 3 * t.hidden_size * t.intermediate_size
    )
    tokens = float(sum(prefix_lengths) + sum(suffix_lengths))
    pairs = sum(p * (p + 1) / 2 for p in prefix_lengths)
    pairs += sum(
        s * prefix_lengths[o] + s * (s + 1) / 2 for s, o in zip(suffix_lengths, owner, strict=True)
    )
    out = {
        "lm_linear": per_token * t.num_hidden_layers * tokens,
        "lm_attention": 4 * q * pairs * t.num_hidden_layers,
        "vision_linear": clips * per_clip["vision_linear"],
        "vision_attention": clips * per_clip["vision_attention"],
        "mergers": clips * per_clip["mergers"],
    }
    out["total"] = sum(out.values())
    return out


@contextlib.contextmanager
def cuda_timer(device: torch.device) -> Iterator[dict[str, float]]:
    result: dict[str, float] = {}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    yield result
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    result["seconds"] = time.perf_counter() - start


def shard(items: Sequence[Any], rank: int, world: int) -> list[Any]:
    """Every world-th item from rank (data parallel under torchrun)."""
    return list(items[rank::world])


def iter_chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
