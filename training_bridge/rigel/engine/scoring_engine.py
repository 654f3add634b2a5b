"""The scoring engine: batched teacher pass and scoring on one device (one rank under torchrun).

:class:`ScoringEngine` runs examples through the per-sample path (:mod:`.batches`) or, for
samples that share a clip and references, the shared-prefix path (:mod:`.prefix`); the CPU work
runs in DataLoader workers (:mod:`.loading`), the resizing, normalisation and patch layout on the
device for the whole batch, and only the answer position reaches the LM head, only its five score
rows. The package docstring (:mod:`training_bridge.rigel.engine`) describes the whole design.

No Django import.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

from ..backbone import Backbone
from ..images import vision_token_mask
from ..inputs import RigelExample
from ..scoring import normalised_score
from ..video import normalize, patchify, resize_uint8
from . import levels
from .attention import (
    compile_vision_blocks,
    enable_fast_vision_attention,
    uncompile_vision_blocks,
    vision_chunk_length,
)
from .batches import PreparedBatch, collate_samples, merge_batches
from .loading import (
    ExampleDataset,
    GroupDataset,
    multiprocessing_context,
    worker_environment,
    worker_init,
)
from .prefix import (
    GroupBatch,
    cache_classes,
    collate_groups,
    merge_group_batches,
    plan_bundles,
    plan_groups,
    suffix_hidden,
)
from .vision_cache import VisionCache, cached_features, keyed_features

# The two kinds of batch the workers prepare: single examples, or clips with their candidates.
_Batch = TypeVar("_Batch", PreparedBatch, GroupBatch)


@dataclass
class EngineOutput:
    hidden: np.ndarray  # (N, hidden) float32, final hidden state at the answer position
    score_logits: np.ndarray  # (N, 5) float32, LM-head logits of "1".."5"
    head_logits: np.ndarray | None = None  # (N, 5) from the scoring head, if any
    scores: np.ndarray | None = None  # (N,) in [0, 1]
    stats: dict[str, Any] = field(default_factory=dict)


def _patch_transformers(
    *, linear_patch_embed: bool, fuse_elementwise: bool, sync_free_deepstack: bool
) -> None:
    """The engine's process-wide patches of transformers' Qwen3-VL modules (`fused`)."""
    if linear_patch_embed or fuse_elementwise or sync_free_deepstack:
        from .. import fused

        if sync_free_deepstack:
            fused.deepstack_without_sync()
        if linear_patch_embed:
            fused.linear_patch_embed()
        if fuse_elementwise:
            fused.fuse_elementwise()


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
        fp8: bool = False,
        fp8_parts: Sequence[str] = ("language",),
        cuda_graphs: bool = False,
        sync_free_deepstack: bool = True,
        compile_vision: bool = False,
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
        # the shared-prefix path's suffixes packed one row per clip (`prefix.pack_suffixes`);
        # False: one row per candidate against a copy of its clip's cache (the A/B baseline)
        self.pack_suffixes = True
        # a clip under several prompt settings (the protocols scored together): its shared part,
        # the video in it, through the language model once (`levels`), packed suffixes only.
        # Off by default: on one H200 it ran 38 % fewer tokens but took about as long warm and
        # longer in a process's first run (docs/benchmarks.md, issue 29 point 2, two levels).
        self.two_level_prefix = False
        self.group_loader_batch = max(1, group_loader_batch)
        _patch_transformers(
            linear_patch_embed=linear_patch_embed,
            fuse_elementwise=fuse_elementwise,
            sync_free_deepstack=sync_free_deepstack,
        )
        self.fuse_elementwise = fuse_elementwise
        self.device = torch.device(backbone.device)
        if fast_vision:
            enable_fast_vision_attention(backbone.model)
        self.fast_vision = fast_vision
        self._speed_up(
            fp8=fp8,
            fp8_parts=fp8_parts,
            cuda_graphs=cuda_graphs,
            compile_layers=compile_layers,
            compile_vision=compile_vision,
        )
        lm_head = backbone.model.lm_head.weight
        self.score_rows = lm_head[backbone.score_token_ids].detach()  # (5, H)
        if isinstance(head, torch.nn.Module):
            head.to(self.device).eval()

    def _speed_up(
        self,
        *,
        fp8: bool,
        fp8_parts: Sequence[str],
        cuda_graphs: bool,
        compile_layers: bool,
        compile_vision: bool,
    ) -> None:
        """FP8 linears, then the compiled decoder layers and vision blocks (see __init__'s
        arguments); sets the flags `close` reads to undo them."""
        model = self.backbone.model
        # FP8 matrix products (engine.fp8) for the linears of the language model's decoder layers
        # (and of the vision tower with fp8_parts=("language", "vision"): slower as long as the
        # tower runs eagerly, each of its linears paying a separate scaling pass); before the
        # compile below, which then traces the FP8 modules.
        self.fp8 = fp8
        if fp8:
            from .fp8 import float8_linears

            float8_linears(model, fp8_parts)
        # Each decoder layer of the language model compiled (fused.compile_decoder_layers): the
        # per-sample path only; the shared-prefix path, which passes a KV cache through the
        # layers, runs them eagerly. ``cuda_graphs`` compiles them in torch.compile's
        # "reduce-overhead" mode (each layer replayed as a CUDA graph, one per padded shape, so
        # sequences are padded to a multiple of 64 tokens to keep the shapes few); it implies
        # ``compile_layers``.
        self.cuda_graphs = cuda_graphs
        if cuda_graphs:
            compile_layers = True
            self.pad_multiple = max(self.pad_multiple, 64)
        self.compile_layers = compile_layers
        if compile_layers:
            self._compile()
        # Each vision block compiled whole (attention.compile_vision_blocks): the tower's
        # LayerNorms, GELU, residual adds and, with FP8 there, the activations' scaling fused
        # into few kernels instead of ~700 eager launches a batch. Needs fast_vision (the
        # uniform-group attention it compiles); groups of mixed sizes run eagerly as before.
        self.compile_vision = compile_vision and self.fast_vision
        if self.compile_vision:
            compile_vision_blocks(model)

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
            RigelExample(references=list(refs), candidate=cand, video_path=os.fspath(path))
            for path, refs, cand in zip(paths, references, candidates, strict=True)
        ]
        out = self.run(examples)
        assert out.scores is not None
        return out.scores

    def run(
        self,
        examples: Sequence[RigelExample],
        *,
        progress: Callable[[int], None] | None = None,
        keep_hidden: bool = True,
    ) -> EngineOutput:
        """Teacher outputs (and scores) of every example, in input order. Samples that share a
        clip and references go through the shared-prefix path (``share_prefix``), the others
        through the per-sample path.

        ``progress(samples done)`` is called after each batch, so a caller can hand the engine a
        long list in one call (one decoding pipeline to start and fill, not one per chunk) and
        still report progress. Without ``keep_hidden`` the final hidden states are not copied
        back (``hidden`` is then (N, 0)): scoring needs only the logits."""
        n = len(examples)
        hidden = np.zeros((n, self.backbone.hidden_size if keep_hidden else 0), dtype=np.float32)
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

        done = 0

        def store(rows: np.ndarray, h: torch.Tensor, s: torch.Tensor, hl: Any) -> None:
            nonlocal done
            if keep_hidden:
                hidden[rows] = h.float().cpu().numpy()
            score_logits[rows] = s.float().cpu().numpy()
            if head_logits is not None and hl is not None:
                head_logits[rows] = hl.float().cpu().numpy()
            done += len(rows)
            if progress is not None:
                progress(done)

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
        scores = normalised_score(logits).numpy()
        return EngineOutput(hidden, score_logits, head_logits, scores, stats)

    def close(self) -> None:
        """Undo what this engine changed beyond itself: its compiled decoder layers, its FP8
        linears, and, where it fused the element-wise ops, the process-wide patches of transformers' Qwen3-VL modules
        (`fused.restore`, the linear patch embedding included). The engine runs eagerly and
        unfused afterwards; a later engine patches again."""
        from .. import fused

        if self.compile_layers:
            fused.uncompile_decoder_layers(self.backbone.model.model.language_model)
            self.compile_layers = False
        if self.compile_vision:
            uncompile_vision_blocks(self.backbone.model)
            self.compile_vision = False
        if self.fuse_elementwise:
            fused.restore()
            self.fuse_elementwise = False
        if self.fp8:
            from .fp8 import restore_linears

            restore_linears(self.backbone.model)
            self.fp8 = False

    @contextlib.contextmanager
    def _eager_layers(self) -> Iterator[None]:
        if not self.compile_layers:
            yield
            return
        from .. import fused

        language_model = self.backbone.model.model.language_model
        fused.uncompile_decoder_layers(language_model)
        try:
            yield
        finally:
            self._compile()

    def _compile(self) -> None:
        from .. import fused

        fused.compile_decoder_layers(
            self.backbone.model.model.language_model,
            hint=fused.ENGINE_HINT,
            mode="reduce-overhead" if self.cuda_graphs else None,
        )

    def _run_groups(
        self,
        examples: Sequence[RigelExample],
        shared: list[list[int]],
        stats: dict[str, Any],
        store: Callable[..., None],
        started: float,
    ) -> None:
        """The shared-prefix path of :meth:`run` (its statistics added to ``stats``). Groups that
        share a video (one clip under several protocols) are decoded together, in one bundle, and
        the vision tower runs once per video."""
        bundles = plan_bundles(examples, shared)
        bundle_of = {number: b for b, bundle in enumerate(bundles) for number in bundle}
        stats.setdefault("vision_clips", 0)
        # where the time goes: waiting for the next batch (decoding workers, collation, the copy
        # to the device) against the forward and its read-back (`store` synchronises)
        stats.setdefault("wait_seconds", 0.0)
        stats.setdefault("forward_seconds", 0.0)
        batches = iter(self.group_device_batches(examples, shared, bundles))
        while True:
            asked = time.perf_counter()
            gb = next(batches, None)
            got = time.perf_counter()
            stats["wait_seconds"] += got - asked
            if gb is None:
                break
            stats.setdefault("first_group_batch_seconds", got - started)
            keys = [bundle_of[int(g)] for g in gb.prefix.indices.tolist()]
            h, s, hl = self.forward_groups(gb, keys)
            stats["vision_clips"] += len(set(keys))
            store(gb.indices.numpy(), h, s, hl)
            stats["forward_seconds"] += time.perf_counter() - got
            stats["batches"] += 1
            stats["shared_samples"] += len(gb.indices)
            stats["shared_clips"] += len(gb.prefix.lengths)
            stats["patches"] += int(gb.prefix.grids.prod(-1).sum())
            executed = levels.counts(gb, self.uses_two_levels(gb), self.backbone.vision.merge_size)
            for key, value in executed.items():
                stats[key] = stats.get(key, 0) + value

    def group_device_batches(
        self,
        examples: Sequence[RigelExample],
        groups: Sequence[Sequence[int]],
        bundles: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[GroupBatch]:
        """Batches of about ``batch_size`` candidates (whole clips) on the device."""
        return self._merged_on_device(
            self.prepared_groups(examples, groups, bundles), merge_group_batches
        )

    def prepared_groups(
        self,
        examples: Sequence[RigelExample],
        groups: Sequence[Sequence[int]],
        bundles: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[GroupBatch]:
        """Group batches of ``group_loader_batch`` clips (bundles of groups sharing a video,
        :func:`plan_bundles`) prepared by the workers, in order."""
        dataset = GroupDataset(examples, groups, self.backbone, self.reference_free, bundles)
        collate = functools.partial(
            collate_groups,
            pad_id=self.backbone.pad_token_id,
            multiple=self.pad_multiple,
            vision_token_ids=(self.backbone.video_token_id, self.backbone.image_token_id),
        )
        loader = self._loader(dataset, collate, self.group_loader_batch)
        with worker_environment():
            iterator = iter(loader)
        yield from iterator

    def device_batches(self, examples: Sequence[RigelExample]) -> Iterator[PreparedBatch]:
        """Batches of ``batch_size`` on the device, merged from the workers' smaller batches
        (small worker batches keep the shared/pinned memory in flight small)."""
        return self._merged_on_device(self.prepared_batches(examples), merge_batches)

    def _merged_on_device(
        self, subs: Iterable[_Batch], merge: Callable[[Sequence[_Batch], int], _Batch]
    ) -> Iterator[_Batch]:
        """The workers' batches moved to the device and merged, in order, into batches of at
        least ``batch_size`` rows (the last one whatever is left)."""
        pending: list[_Batch] = []
        count = 0
        for sub in subs:
            pending.append(sub.to(self.device))
            count += len(sub.indices)
            if count >= self.batch_size:
                yield merge(pending, self.backbone.pad_token_id)
                pending, count = [], 0
        if pending:
            yield merge(pending, self.backbone.pad_token_id)

    def prepared_batches(
        self,
        examples: Sequence[RigelExample],
        batch_sampler: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[PreparedBatch]:
        """Batches of ``loader_batch`` prepared by the workers (pinned), in input order; or, with
        ``batch_sampler``, exactly those batches of example positions, in that order."""
        dataset = ExampleDataset(examples, self.backbone, self.reference_free)
        collate = functools.partial(
            collate_samples, pad_id=self.backbone.pad_token_id, multiple=self.pad_multiple
        )
        loader = self._loader(dataset, collate, self.loader_batch, batch_sampler)
        with worker_environment():  # the workers (and a fork server) start here
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
        context = multiprocessing_context(self.mp_context) if workers > 0 else None
        return torch.utils.data.DataLoader(
            dataset,
            **sizing,
            num_workers=workers,
            collate_fn=collate,
            pin_memory=self.device.type == "cuda",
            prefetch_factor=self.prefetch_factor if workers > 0 else None,
            persistent_workers=False,
            multiprocessing_context=context,
            worker_init_fn=worker_init if workers > 0 else None,
        )

    # -- GPU side -----------------------------------------------------------------------------

    @torch.inference_mode()
    def forward_batch(
        self, batch: PreparedBatch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(hidden (B, H), LM-head score logits (B, 5), head logits (B, 5) or None)."""
        batch = batch.to(self.device)
        if self.cuda_graphs:  # a new step: the graphs may overwrite the last batch's outputs
            torch.compiler.cudagraph_mark_step_begin()
        pixel_values, grid_thw = self.pixels(batch)
        hidden = self.answer_hidden(batch, pixel_values, grid_thw)
        score_logits = hidden.float() @ self.score_rows.float().T
        head_logits = self.head(hidden.float()) if self.head is not None else None
        return hidden, score_logits, head_logits

    @torch.inference_mode()
    def forward_groups(
        self, batch: GroupBatch, video_keys: Sequence[Any] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Shared-prefix forward: vision tower and prefix once per clip, suffixes per candidate.
        With ``video_keys`` (one per prefix row), prefixes of the same video (a clip under
        several protocols) share one vision-tower pass, and, on the two-level path
        (:meth:`uses_two_levels`), one language-model pass of their shared part. Returns the
        same triple as :meth:`forward_batch`, one row per candidate."""
        batch = batch.to(self.device)
        if self.uses_two_levels(batch):
            hidden = levels.two_level_hidden(self, batch, video_keys)
        else:
            embeds, deepstack = keyed_features(self, batch.prefix, video_keys)
            prefix_kv = self.prefix_cache(batch.prefix, embeds, deepstack)
            hidden = suffix_hidden(
                self.backbone.model.model.language_model,
                batch,
                prefix_kv,
                pad_id=self.backbone.pad_token_id,
                packed=self.pack_suffixes,
            )
        score_logits = hidden.float() @ self.score_rows.float().T
        head_logits = self.head(hidden.float()) if self.head is not None else None
        return hidden, score_logits, head_logits

    def uses_two_levels(self, batch: GroupBatch) -> bool:
        """Whether ``batch`` takes the two-level path (`levels`): switched on, packed suffixes,
        and some clip under two prompt settings or more in it."""
        return self.two_level_prefix and self.pack_suffixes and levels.shares_video(batch)

    def _language_model(
        self,
        batch: PreparedBatch,
        video_embeds: torch.Tensor,
        deepstack: list[torch.Tensor],
        **cache_options: Any,
    ) -> Any:
        """The language model over ``batch`` (right padding, causal, no mask) with the video
        features in the vision tokens' places; ``cache_options`` say what it caches."""
        lm = self.backbone.model.model.language_model
        ids = batch.input_ids
        inputs_embeds = lm.embed_tokens(ids)
        mask = vision_token_mask(ids, self.backbone)
        inputs_embeds = inputs_embeds.masked_scatter(
            mask.unsqueeze(-1), video_embeds.to(inputs_embeds.dtype)
        )
        return lm(
            inputs_embeds=inputs_embeds,
            position_ids=batch.positions,
            attention_mask=None,
            visual_pos_masks=mask,
            deepstack_visual_embeds=[d.to(inputs_embeds.dtype) for d in deepstack],
            **cache_options,
        )

    def prefix_cache(
        self, prefix: PreparedBatch, video_embeds: torch.Tensor, deepstack: list[torch.Tensor]
    ) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Keys and values of every layer for the clips' prefixes (right-padded, causal)."""
        recording, _ = cache_classes()
        cache = recording(self.backbone.model.model.language_model.config)
        self._language_model(prefix, video_embeds, deepstack, cache=cache, use_cache=True)
        return cache.recorded

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
        return pixel_values, batch.grids.to(self.device, non_blocking=True)

    def vision_features(
        self, pixel_values: torch.Tensor, grid_thw: torch.Tensor, grids_cpu: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Merged video embeddings (tokens, H) and the DeepStack features, for the whole batch."""
        visual = self.backbone.model.model.visual
        chunks = (grids_cpu[:, 1] * grids_cpu[:, 2]).unique()
        with vision_chunk_length(int(chunks[0]) if len(chunks) == 1 else None):
            out = visual(pixel_values, grid_thw=grid_thw, return_dict=True)
        return out.pooler_output, list(out.deepstack_features)

    def cached_vision_features(
        self, batch: PreparedBatch, keys: Sequence[Any], cache: VisionCache
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The batch's merged video embeddings and DeepStack features, the vision tower running
        only on clips not yet in ``cache`` (keyed by ``keys``, one per row;
        :func:`.vision_cache.cached_features`)."""
        return cached_features(self, batch, keys, cache)

    def answer_hidden(
        self, batch: PreparedBatch, pixel_values: torch.Tensor, grid_thw: torch.Tensor
    ) -> torch.Tensor:
        embeds, deepstack = self.vision_features(pixel_values, grid_thw, batch.grids)
        return self.language_hidden(batch, embeds, deepstack)

    def language_hidden(
        self, batch: PreparedBatch, video_embeds: torch.Tensor, deepstack: list[torch.Tensor]
    ) -> torch.Tensor:
        """Final hidden state at each row's last real token (right padding, causal, no mask)."""
        out = self._language_model(batch, video_embeds, deepstack, use_cache=False)
        ids = batch.input_ids
        last = (batch.lengths - 1).to(ids.device)
        return out.last_hidden_state[torch.arange(ids.shape[0], device=ids.device), last]
