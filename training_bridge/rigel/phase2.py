"""Phase 2: adapt the backbone to human judgments under the frozen scoring head (Section 3.2).

LoRA (rank 8, alpha 16 by default) goes on the language model's `q_proj` and `v_proj` only (the
paper's 1.61M parameters; `lora_targets="wide"` takes every linear layer of the decoder); the vision
tower, the embeddings, the LM head and the scoring head stay frozen. The loss is the cross-entropy
of the head's five-way output against the one-hot training class of the release (class 1..5 ->
index 0..4), over one epoch at an effective batch of 8 (micro-batches with gradient accumulation,
and data parallelism under torchrun with a hand-rolled gradient all-reduce).

A checkpoint (LoRA weights, optimiser state, step, history) is handed to `on_checkpoint` every K
optimiser steps; `resume` takes such a checkpoint and continues at the next step with the same data
order, so a killed worker loses at most K steps.

With `engine` (a `training_bridge.rigel.engine.ScoringEngine` over the same backbone; used on CUDA)
the same steps run faster, with the same numbers: the micro-batches of the whole run are decoded
and tokenised in the engine's worker processes ahead of the GPU, in the training order; resizing
and normalisation run on the GPU; the frozen vision tower runs once per clip (its features are
cached, `vision_cache_clips` clips at most); the language model reads right-padded rows without an
attention mask (causal, flash attention); the optimiser (Adam, the paper's) is the fused CUDA one.

With `config.phase2_compile` ("auto": on CUDA for at least `PHASE2_COMPILE_MIN_SAMPLES` samples
per process) the language model's decoder layers, LoRA included, are compiled for training before
the first step (`fused.compile_decoder_layers`: the graphs of the first two layers serve all, with
symbolic sequence lengths), in both paths; the first micro-batch pays the compile time. Nothing
falls back to eager silently: a graph break, too many recompilations or a failed forward compile
raise `fused.LayerCompileError`, a failed backward compile torch's own error from `backward()`;
`phase2_compile="off"` trains eagerly. The layers stay compiled after training
(`fused.uncompile_decoder_layers` undoes it).
"""

from __future__ import annotations

import io
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

import torch

from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.data import ExampleLoader, ReleaseRecord
from training_bridge.rigel.distributed import Distributed
from training_bridge.rigel.head import ScoringHead
from training_bridge.rigel.losses import phase2_loss
from training_bridge.rigel.score_logits import (
    adapter_autocast,
    head_score_logits,
    hidden_score_logits,
)

StepCallback = Callable[[int, int, float], None]  # (step done, total steps, loss of that step)
CheckpointCallback = Callable[[int, bytes], None]  # (step done, serialised checkpoint)


@dataclass
class Phase2Result:
    steps: int
    samples: int
    mean_loss: float
    resumed_from_step: int
    history: list[dict[str, float]] = field(default_factory=list)


def apply_lora(backbone: Any, config: RigelConfig) -> Any:
    """Inject LoRA adapters into the language model (in place), their weights in
    `config.lora_dtype_name` (float32 master weights by default, whatever the backbone's dtype:
    the forward runs under :func:`adapter_autocast`); returns the PeftModel."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.lora_target_regex(),
        bias="none",
    )
    with warnings.catch_warnings():
        # PEFT asks transformers a deprecated question (is_gradient_checkpointing); not ours to fix.
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = get_peft_model(backbone.model, lora)
    adapter_dtype = getattr(torch, config.lora_dtype_name)
    with torch.no_grad():
        for parameter in peft_model.parameters():
            if parameter.requires_grad and parameter.dtype != adapter_dtype:
                parameter.data = parameter.data.to(adapter_dtype)
    names = [name for name, p in peft_model.named_parameters() if p.requires_grad]
    if not names:
        raise RuntimeError("LoRA matched no module of the language model")
    if any("visual" in name for name in names):
        raise RuntimeError("LoRA must not touch the vision tower")
    backbone.extra["peft_model"] = peft_model
    return peft_model


def trainable_parameters(model: Any) -> list[tuple[str, torch.nn.Parameter]]:
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def lora_state(model: Any) -> dict[str, torch.Tensor]:
    return {name: p.detach().cpu().clone() for name, p in trainable_parameters(model)}


def load_lora_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    parameters = dict(trainable_parameters(model))
    missing = sorted(set(parameters) - set(state))
    if missing:
        raise ValueError(f"checkpoint lacks LoRA weights {missing[:3]}...")
    with torch.no_grad():
        for name, parameter in parameters.items():
            parameter.copy_(state[name].to(parameter.device, parameter.dtype))


def save_adapter(peft_model: Any) -> dict[str, bytes]:
    """The adapter in PEFT's own format: {"adapter_model.safetensors": ..., "adapter_config.json"}."""
    with tempfile.TemporaryDirectory() as folder:
        peft_model.save_pretrained(folder)
        return {path.name: path.read_bytes() for path in Path(folder).iterdir() if path.is_file()}


class _EngineMicroBatches:
    """The run's micro-batches, prepared by the engine's workers in the order the loop takes them,
    and their five score logits through the language model (with LoRA) and the head.

    The frozen vision tower runs once per clip (``VisionCache``), and for the clips first seen in
    the next ``lookahead`` micro-batches together: one call of the tower (its ~700 eager kernel
    launches and its host synchronisations) serves several steps instead of one call per step.
    The features are the same per clip (the tower treats clips independently; only the GEMMs'
    row counts change)."""

    def __init__(
        self,
        engine: Any,
        loader: ExampleLoader,
        records: Sequence[ReleaseRecord],
        plan: Sequence[Sequence[int]],
        cache_clips: int,
        lookahead: int = 8,
    ):
        from collections import deque

        from training_bridge.rigel.engine import VisionCache

        self.engine = engine
        flat = [index for micro in plan for index in micro]
        self.keys = [
            (records[i].clip_id, records[i].frames_key, records[i].video_key) for i in flat
        ]
        examples = loader.examples([records[i] for i in flat])
        sampler: list[list[int]] = []
        start = 0
        for micro in plan:
            sampler.append(list(range(start, start + len(micro))))
            start += len(micro)
        self.batches = iter(engine.prepared_batches(examples, batch_sampler=sampler))
        # the window must fit in the cache, or a clip could be evicted before its step
        self.lookahead = max(1, min(lookahead, cache_clips // max(1, max(map(len, plan)))))
        self.cache = VisionCache(max(cache_clips, 1))
        self.ahead: Any = deque()

    def _fill(self) -> None:
        from training_bridge.rigel.engine.batches import merge_batches

        while len(self.ahead) < self.lookahead:
            batch = next(self.batches, None)
            if batch is None:
                break
            batch = batch.to(self.engine.device)
            self.ahead.append((batch, [self.keys[int(i)] for i in batch.indices]))
        first_keys = self.ahead[0][1]
        if all(key in self.cache for key in first_keys):
            return
        # The clips not yet cached in the whole window, through the tower in one call.
        parts, wanted = [], []
        seen: set[Any] = set()
        for batch, keys in self.ahead:
            rows = []
            for row, key in enumerate(keys):
                if key not in self.cache and key not in seen:
                    seen.add(key)
                    rows.append(row)
                    wanted.append(key)
            if rows:
                parts.append(batch.select(rows))
        sub = merge_batches(parts, self.engine.backbone.pad_token_id)
        self.engine.cached_vision_features(sub, wanted, self.cache)

    def logits(self, backbone: Any, head: ScoringHead | None) -> torch.Tensor:
        self._fill()
        batch, keys = self.ahead.popleft()
        embeds, deepstack = self.engine.cached_vision_features(batch, keys, self.cache)
        with adapter_autocast(backbone):
            hidden = self.engine.language_hidden(batch, embeds, deepstack)
        return hidden_score_logits(backbone, head, hidden)


def make_phase2_optimizer(
    parameters: Sequence[torch.nn.Parameter], config: RigelConfig, *, fused: bool = False
) -> torch.optim.Optimizer:
    """The paper's Phase 2 optimiser (Table 4): Adam, weight decay 0.01 added to the gradient;
    `phase2_optimizer="adamw"` decouples the decay instead. Fused CUDA kernels on a GPU."""
    kind = torch.optim.Adam if config.phase2_optimizer == "adam" else torch.optim.AdamW
    return kind(
        list(parameters),
        lr=config.phase2_learning_rate,
        weight_decay=config.phase2_weight_decay,
        fused=fused,
    )


def data_order(count: int, *, seed: int, epoch: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed * 1000 + epoch)
    return torch.randperm(count, generator=generator).tolist()


def epoch_orders(records: Sequence[ReleaseRecord], config: RigelConfig) -> list[list[int]]:
    """Phase 2's passes over the records, each a list of record positions in training order.

    The paper's Table 4 gives Phase 2 "1 (image) / 1 (video)" epochs (seed 000, line 210):
    ``config.phase2_epochs`` passes over the video records and ``config.phase2_image_epochs``
    over the image records. How the two are arranged is not in the paper
    (``config.phase2_modality_order``): "mixed" shuffles epoch k of both modalities together;
    "images-first" / "videos-first" run every epoch of one modality before the other's. Pass k's
    shuffle is ``data_order(len(pass), seed, k)`` over the pass's records in release order, so a
    release of videos only trains exactly as before images existed."""
    videos = [i for i, record in enumerate(records) if not record.is_image]
    images = [i for i, record in enumerate(records) if record.is_image]
    video_epochs = int(config.phase2_epochs)
    image_epochs = int(config.phase2_image_epochs)
    passes: list[list[int]] = []
    if config.phase2_modality_order == "mixed":
        for epoch in range(max(video_epochs, image_epochs)):
            members = sorted(
                (videos if epoch < video_epochs else []) + (images if epoch < image_epochs else [])
            )
            passes.append(members)
    else:
        first, second = (
            ((images, image_epochs), (videos, video_epochs))
            if config.phase2_modality_order == "images-first"
            else ((videos, video_epochs), (images, image_epochs))
        )
        for members, epochs in (first, second):
            passes.extend(list(members) for _ in range(epochs))
    passes = [members for members in passes if members]
    return [
        [members[k] for k in data_order(len(members), seed=config.seed, epoch=epoch)]
        for epoch, members in enumerate(passes)
    ]


class Phase2Checkpoint(TypedDict):
    """What a Phase 2 checkpoint holds (`torch.save`d; loaded with ``weights_only=True``)."""

    step: int  # optimiser steps done
    lora: dict[str, torch.Tensor]  # the trainable LoRA weights by parameter name
    optimizer: dict[str, Any]  # the optimiser's own state_dict
    history: list[dict[str, float]]
    loss_total: float  # summed step loss × step size so far (the mean loss's numerator)


def serialise_checkpoint(state: Phase2Checkpoint) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def deserialise_checkpoint(data: bytes) -> Phase2Checkpoint:
    return cast(
        Phase2Checkpoint, torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    )


@dataclass
class _Step:
    """One optimiser step of the schedule: its epoch, the global batch's record positions and this
    process's micro-batches of them."""

    index: int
    epoch: int
    batch_positions: list[int]
    micros: list[list[int]]


def _frozen(head: ScoringHead | None) -> ScoringHead | None:
    if head is not None:
        head.eval()  # no dropout: Phase 2 reads the head, it does not train it
        for parameter in head.parameters():
            parameter.requires_grad_(False)
    return head


def _schedule(
    orders: list[list[int]], config: RigelConfig, dist: Distributed, start_step: int
) -> tuple[int, list[_Step]]:
    """(total steps, the steps from `start_step` on): one per global batch of each epoch's order,
    with this process's share cut into micro-batches."""
    global_batch = config.phase2_batch_size
    micro_size = config.phase2_micro_batch_size
    # (epoch, first position of the step in that epoch's order), one per optimiser step
    steps = [
        (epoch, first)
        for epoch, order in enumerate(orders)
        for first in range(0, len(order), global_batch)
    ]
    schedule: list[_Step] = []
    for step in range(start_step, len(steps)):
        epoch, first = steps[step]
        batch_positions = orders[epoch][first : first + global_batch]
        mine = dist.shard(batch_positions)
        micros = [mine[first : first + micro_size] for first in range(0, len(mine), micro_size)]
        schedule.append(_Step(step, epoch, batch_positions, micros))
    return len(steps), schedule


class _LossReadback:
    """The steps' losses read back to the host one step late (``overlap_host``): each step's
    summed loss is copied to pinned memory behind an event, and read once the next step's work is
    queued, so the host never waits for the GPU to drain its queue (the losses, history, callbacks
    and checkpoints are the same, the callbacks only come one step later)."""

    def __init__(
        self,
        *,
        total_steps: int,
        history: list[dict[str, float]],
        loss_total: float,
        on_step: StepCallback | None,
        is_main: bool,
        overlap: bool,
        on_cuda: bool,
    ) -> None:
        self.total_steps = total_steps
        self.history = history
        self.loss_total = loss_total
        self.on_step = on_step if is_main else None
        self.overlap = overlap
        self.on_cuda = on_cuda
        self.pending: list[tuple[int, int, int, torch.Tensor, Any]] = []

    def push(self, done: int, epoch: int, size: int, step_loss: torch.Tensor) -> None:
        if not self.overlap:
            self.pending.append((done, epoch, size, step_loss.cpu(), None))
            self.settle(keep=0)
            return
        if self.on_cuda:
            host_loss = torch.empty((), dtype=torch.float32, pin_memory=True)
            host_loss.copy_(step_loss, non_blocking=True)
            event: Any = torch.cuda.Event()
            event.record()
        else:
            host_loss, event = step_loss.detach().clone(), None
        self.pending.append((done, epoch, size, host_loss, event))
        self.settle(keep=1)

    def settle(self, keep: int) -> None:
        while len(self.pending) > keep:
            done, epoch, size, host_loss, event = self.pending.pop(0)
            if event is not None:
                event.synchronize()
            step_loss = float(host_loss)
            self.loss_total += step_loss * size
            self.history.append({"step": done, "epoch": epoch + 1, "loss": step_loss})
            if self.on_step:
                self.on_step(done, self.total_steps, step_loss)


@dataclass
class _Training:
    """What every step reads: the backbone (with LoRA), the frozen head, the data, the config."""

    backbone: Any
    head: ScoringHead | None
    loader: ExampleLoader
    records: Sequence[ReleaseRecord]
    config: RigelConfig


def _prepare_steps(
    schedule: list[_Step],
    training: _Training,
    engine: Any | None,
    vision_cache_clips: int,
    vision_lookahead: int,
) -> _EngineMicroBatches | None:
    """Compile the decoder layers when the config asks (after LoRA is injected: the adapters are
    part of the compiled graph); with an engine, its micro-batches of the whole schedule."""
    backbone = training.backbone
    plan = [micro for step in schedule for micro in step.micros]  # this process's micro-batches
    if training.config.compiles_phase2(backbone.device.type, sum(len(micro) for micro in plan)):
        from training_bridge.rigel.fused import compile_decoder_layers

        compile_decoder_layers(backbone.model.model.language_model)
    if engine is None or not schedule:
        return None
    return _EngineMicroBatches(
        engine, training.loader, training.records, plan, vision_cache_clips, vision_lookahead
    )


def _resumed(
    resume: bytes | None, model: Any, optimizer: torch.optim.Optimizer
) -> tuple[int, list[dict[str, float]], float]:
    """(first step, history, summed loss so far): a checkpoint's, its LoRA weights and optimiser
    state loaded; a fresh run's without one."""
    if resume is None:
        return 0, [], 0.0
    state = deserialise_checkpoint(resume)
    load_lora_state(model, state["lora"])
    optimizer.load_state_dict(state["optimizer"])
    return (
        int(state["step"]),
        list(state.get("history", [])),
        float(state.get("loss_total", 0.0)),
    )


def _checkpoint(
    done: int, model: Any, optimizer: torch.optim.Optimizer, readback: _LossReadback
) -> bytes:
    return serialise_checkpoint(
        {
            "step": done,
            "lora": lora_state(model),
            "optimizer": optimizer.state_dict(),
            "history": readback.history,
            "loss_total": readback.loss_total,
        }
    )


def _step_loss(
    step: _Step, training: _Training, fast: _EngineMicroBatches | None
) -> list[torch.Tensor]:
    """Forward and backward of the step's micro-batches; their weighted losses (not read back)."""
    from training_bridge.rigel.inputs import build_batch

    backbone, head = training.backbone, training.head
    on_cuda = backbone.device.type == "cuda"
    step_losses: list[torch.Tensor] = []
    for positions in step.micros:
        micro = [training.records[i] for i in positions]
        targets = torch.tensor([r.class_index for r in micro])
        targets = targets.to(backbone.device, non_blocking=on_cuda)
        if fast is not None:
            logits = fast.logits(backbone, head)
        else:
            batch = build_batch(
                training.loader.examples(micro),
                backbone,
                reference_free=training.config.reference_free,
                device=backbone.device,
            )
            logits = head_score_logits(backbone, head, batch)
        # Each micro-batch's mean loss weighted by its share of the global batch: the sum
        # over micro-batches and processes is the global batch's mean.
        loss = phase2_loss(logits, targets) * (len(micro) / len(step.batch_positions))
        loss.backward()
        step_losses.append(loss.detach().float().reshape(1))
    return step_losses


def train_phase2(
    *,
    backbone: Any,
    head: ScoringHead | None,
    loader: ExampleLoader,
    records: Sequence[ReleaseRecord],
    config: RigelConfig,
    dist: Distributed | None = None,
    on_step: StepCallback | None = None,
    on_checkpoint: CheckpointCallback | None = None,
    resume: bytes | None = None,
    log: Callable[[str], None] | None = None,
    engine: Any | None = None,
    vision_cache_clips: int = 2048,
    overlap_host: bool = True,
    vision_lookahead: int = 8,
) -> Phase2Result:
    """Train LoRA adapters (already injected with `apply_lora`) for `config.phase2_epochs`;
    through `engine` when given (see the module docstring). ``overlap_host`` reads each step's
    loss back one step late (on CUDA through pinned memory and an event), so the host keeps
    queueing work while the GPU runs; the step callback then comes one step late (False: at the
    end of each step, for comparisons). With the engine, the vision tower runs for the new clips
    of the next ``vision_lookahead`` micro-batches at once (1: each micro-batch's own)."""
    dist = dist or Distributed()
    model = backbone.extra.get("peft_model") or apply_lora(backbone, config)
    head = _frozen(head)
    parameters = [p for _, p in trainable_parameters(model)]
    optimizer = make_phase2_optimizer(parameters, config, fused=backbone.device.type == "cuda")
    if len(records) == 0:
        raise ValueError("no training samples for Phase 2")
    orders = epoch_orders(records, config)
    if not orders:
        raise ValueError("no training samples for Phase 2 under its image/video epochs")
    total_steps, _ = _schedule(orders, config, dist, start_step=0)
    start_step, history, loss_total = _resumed(resume, model, optimizer)
    if resume is not None and log:
        log(f"phase 2: resumed from the checkpoint at step {start_step}/{total_steps}")
    model.train()
    # The vision tower has no trainable weight; keep it (and its dropout-free blocks) in eval.
    backbone.model.model.visual.eval()
    # The whole schedule first (the engine prepares its micro-batches ahead, in this order).
    _, schedule = _schedule(orders, config, dist, start_step)
    training = _Training(backbone, head, loader, records, config)
    fast = _prepare_steps(schedule, training, engine, vision_cache_clips, vision_lookahead)
    readback = _LossReadback(
        total_steps=total_steps,
        history=history,
        loss_total=loss_total,
        on_step=on_step,
        is_main=dist.is_main,
        overlap=overlap_host,
        on_cuda=backbone.device.type == "cuda",
    )
    for step in schedule:
        optimizer.zero_grad(set_to_none=True)
        step_losses = _step_loss(step, training, fast)
        dist.all_reduce_gradients(parameters)
        optimizer.step()
        step_loss = dist.all_reduce_sum_tensor(
            torch.cat(step_losses).sum() if step_losses else torch.zeros((), device=backbone.device)
        )
        done = step.index + 1
        readback.push(done, step.epoch, len(step.batch_positions), step_loss)
        if on_checkpoint and (done % config.phase2_checkpoint_every == 0) and done < total_steps:
            readback.settle(keep=0)
            if dist.is_main:
                on_checkpoint(done, _checkpoint(done, model, optimizer, readback))
            dist.barrier()
    readback.settle(keep=0)
    model.eval()
    samples = sum(len(order) for order in orders)
    return Phase2Result(
        steps=total_steps,
        samples=samples,
        mean_loss=readback.loss_total / max(1, samples),
        resumed_from_step=start_step,
        history=history,
    )
