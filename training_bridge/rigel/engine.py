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
- only the answer position reaches the LM head, and only the five score rows of it.

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
        self.backbone = Backbone(**{**backbone.__dict__, "model": _ConfigOnly(backbone.model)})

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
# are the parallelism). Under torchrun (which sets OMP_NUM_THREADS=1) the engine ran at full speed
# on the GPU machine; single-process runs without it did not finish in time there.
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
        mp_context: str = "forkserver",
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
        if linear_patch_embed or fuse_elementwise:
            from . import fused

            if linear_patch_embed:
                fused.linear_patch_embed()
            if fuse_elementwise:
                fused.fuse_elementwise()
        self.device = torch.device(backbone.device)
        model = backbone.model
        if fast_vision:
            enable_fast_vision_attention(model)
        self.fast_vision = fast_vision
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
        n = len(examples)
        hidden = np.zeros((n, self.backbone.hidden_size), dtype=np.float32)
        score_logits = np.zeros((n, 5), dtype=np.float32)
        head_logits = np.zeros((n, 5), dtype=np.float32) if self.head is not None else None
        stats: dict[str, Any] = {"batches": 0, "tokens": 0, "video_tokens": 0, "patches": 0}
        started = time.perf_counter()
        for batch in self.device_batches(examples):
            h, s, hl = self.forward_batch(batch)
            rows = batch.indices.numpy()
            hidden[rows] = h.float().cpu().numpy()
            score_logits[rows] = s.float().cpu().numpy()
            if head_logits is not None and hl is not None:
                head_logits[rows] = hl.float().cpu().numpy()
            stats["batches"] += 1
            stats["tokens"] += int(batch.lengths.sum())
            grids = batch.grids
            stats["patches"] += int(grids.prod(-1).sum())
            stats["video_tokens"] += int(grids.prod(-1).sum()) // self.backbone.vision.merge_size**2
        stats["seconds"] = time.perf_counter() - started
        logits = torch.from_numpy(head_logits if head_logits is not None else score_logits)
        scores = expected_score(logits).numpy()
        return EngineOutput(hidden, score_logits, head_logits, scores, stats)

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

    def prepared_batches(self, examples: Sequence[RigelExample]) -> Iterator[PreparedBatch]:
        """Batches of ``loader_batch`` prepared by the workers (pinned), in input order."""
        dataset = _ExampleDataset(examples, self.backbone, self.reference_free)
        collate = functools.partial(
            _collate, pad_id=self.backbone.pad_token_id, multiple=self.pad_multiple
        )
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=self.loader_batch,
            shuffle=False,
            num_workers=self.num_workers,
            collate_fn=collate,
            pin_memory=self.device.type == "cuda",
            prefetch_factor=self.prefetch_factor if self.num_workers > 0 else None,
            persistent_workers=False,
            # Not "fork": a parent that has used OpenCV/OpenMP thread pools can deadlock its
            # forked children (seen on the GPU machine); the fork server starts clean.
            multiprocessing_context=self.mp_context if self.num_workers > 0 else None,
            worker_init_fn=_worker_init if self.num_workers > 0 else None,
        )
        with _worker_environment():  # the workers (and a fork server) start here
            iterator = iter(loader)
        yield from iterator

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
