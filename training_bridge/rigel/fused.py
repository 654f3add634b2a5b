"""Opt-in speed-ups of transformers' Qwen3-VL modules for the GPU (inference and Phase 2).

- ``linear_patch_embed``: the vision patch embedding is a Conv3d whose stride equals its kernel,
  i.e. one matrix product over the flattened patches; run it as ``F.linear`` (cuDNN's 3-D
  convolution is a slow way to do a GEMM).
- ``deepstack_without_sync``: the DeepStack additions without boolean indexing (no host
  synchronisation), exactly the same sums.
- ``fuse_elementwise``: the RMSNorm (fp32 upcast, square, mean, rsqrt, scale), SiLU-gate product
  and the rotary embeddings of text and vision run as single kernels compiled by
  ``torch.compile`` (same arithmetic, fewer passes over memory).
- ``compile_decoder_layers``: each decoder layer of one language model is compiled whole: for
  training (Phase 2) forward and backward (AOTAutograd), LoRA adapters included; for the scoring
  engine (``compile_layers``) forward only. One compiled graph serves every layer ("regional
  compilation").

The first three patch the transformers classes/functions in place (process wide) and keep the numbers
within rounding of the original; ``restore()`` undoes them. The third changes the given model's
layers only; ``uncompile_decoder_layers`` undoes it. No Django import.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

_ORIGINAL: dict[str, Any] = {}


def _module() -> Any:
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    return modeling_qwen3_vl


def linear_patch_embed() -> None:
    m = _module()
    cls = m.Qwen3VLVisionPatchEmbed
    _ORIGINAL.setdefault("patch_embed", cls.forward)

    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        weight = self.proj.weight
        flat = hidden_states.reshape(-1, weight[0].numel()).to(weight.dtype)
        return F.linear(flat, weight.reshape(weight.shape[0], -1), self.proj.bias)

    cls.forward = forward


def deepstack_without_sync() -> None:
    """The language model's DeepStack step (adding the vision tower's intermediate features to
    the video tokens' hidden states in its first layers) without boolean indexing: transformers
    reads ``hidden[mask]`` and writes ``hidden[mask] = ...``, two ``nonzero`` calls that each wait
    for the GPU to drain its queue. Here the features are scattered into a zero tensor of the
    hidden states' shape (``masked_scatter``, no read-back) and added: the same sums at the video
    tokens, ``x + 0`` (exactly ``x``) elsewhere; gradients flow to both as before."""
    m = _module()
    cls = m.Qwen3VLTextModel
    _ORIGINAL.setdefault("deepstack", cls._deepstack_process)

    def _deepstack_process(
        self: Any,
        hidden_states: torch.Tensor,
        visual_pos_masks: torch.Tensor,
        visual_embeds: torch.Tensor,
    ) -> torch.Tensor:
        mask = visual_pos_masks.to(hidden_states.device).unsqueeze(-1)
        visual_embeds = visual_embeds.to(hidden_states.device, hidden_states.dtype)
        added = torch.zeros_like(hidden_states).masked_scatter(mask, visual_embeds)
        return hidden_states + added

    cls._deepstack_process = _deepstack_process


def fuse_elementwise(dynamic: bool = True) -> None:
    m = _module()
    compile_kw: dict[str, Any] = {"dynamic": dynamic, "fullgraph": True}

    @torch.compile(**compile_kw)
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(dtype)

    @torch.compile(**compile_kw)
    def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    @torch.compile(**compile_kw)
    def rotary(q, k, cos, sin, unsqueeze_dim: int = 1):  # type: ignore[no-untyped-def]
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)

    @torch.compile(**compile_kw)
    def rotary_vision(q, k, cos, sin):  # type: ignore[no-untyped-def]
        dq, dk = q.dtype, k.dtype
        q, k = q.float(), k.float()
        cos, sin = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
        return ((q * cos) + (rotate_half(q) * sin)).to(dq), ((k * cos) + (rotate_half(k) * sin)).to(
            dk
        )

    _ORIGINAL.setdefault("rms_forward", m.Qwen3VLTextRMSNorm.forward)
    _ORIGINAL.setdefault("mlp_forward", m.Qwen3VLTextMLP.forward)
    _ORIGINAL.setdefault("rotary", m.apply_rotary_pos_emb)
    _ORIGINAL.setdefault("rotary_vision", m.apply_rotary_pos_emb_vision)

    def rms_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)

    def mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x)))

    m.Qwen3VLTextRMSNorm.forward = rms_forward
    m.Qwen3VLTextMLP.forward = mlp_forward
    m.apply_rotary_pos_emb = rotary
    m.apply_rotary_pos_emb_vision = rotary_vision


def restore() -> None:
    m = _module()
    if "deepstack" in _ORIGINAL:
        m.Qwen3VLTextModel._deepstack_process = _ORIGINAL.pop("deepstack")
    if "patch_embed" in _ORIGINAL:
        m.Qwen3VLVisionPatchEmbed.forward = _ORIGINAL.pop("patch_embed")
    if "rms_forward" in _ORIGINAL:
        m.Qwen3VLTextRMSNorm.forward = _ORIGINAL.pop("rms_forward")
        m.Qwen3VLTextMLP.forward = _ORIGINAL.pop("mlp_forward")
        m.apply_rotary_pos_emb = _ORIGINAL.pop("rotary")
        m.apply_rotary_pos_emb_vision = _ORIGINAL.pop("rotary_vision")


class LayerCompileError(RuntimeError):
    """torch.compile could not trace or compile a decoder layer."""


PHASE2_HINT = "Phase 2 trains uncompiled with phase2_compile='off'"
ENGINE_HINT = "the engine scores uncompiled with compile_layers=False"


def _raising_clearly(compiled: Any, hint: str) -> Any:
    # Dynamo's own exceptions say what failed but not which switch avoids it; any other error
    # (out of memory, a shape mismatch at run time) passes through unchanged.
    failures: tuple[type[BaseException], ...] = (torch._dynamo.exc.TorchDynamoException,)
    recompile_limit = getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", None)
    if recompile_limit is not None:
        failures += (recompile_limit,)

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return compiled(*args, **kwargs)
        except failures as error:
            first_line = next(iter(str(error).splitlines()), "")
            raise LayerCompileError(
                "torch.compile failed on a decoder layer of the language model "
                f"({type(error).__name__}: {first_line}); {hint}"
            ) from error

    call.compiled_decoder_layer = True  # type: ignore[attr-defined]
    return call


def _is_compiled(layer: torch.nn.Module) -> bool:
    return getattr(layer.__dict__.get("_compiled_call_impl"), "compiled_decoder_layer", False)


def compile_decoder_layers(
    language_model: Any,
    *,
    dynamic: bool = True,
    hint: str = PHASE2_HINT,
    mode: str | None = None,
) -> int:
    """Compile each of `language_model.layers` with ``nn.Module.compile`` (the modules stay the
    same objects, so parameter names, state dicts and PEFT's adapter files do not change); returns
    how many layers are compiled. Layers compiled before are left as they are.

    Dynamo treats the layer's parameters as inputs, so the graph compiled for one layer is reused
    by the others of the same structure: two graphs in all for LoRA training (the first layer reads
    inputs that need no gradient, the others do). ``dynamic=True`` keeps the batch and sequence
    lengths symbolic, so varying micro-batches do not recompile (a batch of one sample, eval mode or
    another adapter dtype does, once each). ``fullgraph=True``: a graph break, or more variants
    than ``torch._dynamo.config.recompile_limit`` (8), raise ``LayerCompileError`` instead of
    running partly or wholly uncompiled (a backward graph that fails to compile raises torch's
    own error from ``backward()``). ``hint`` ends the error's message: the switch that avoids
    compiling. Inference (the scoring engine's ``compile_layers``) compiles the same way, forward
    only. ``mode`` is torch.compile's (``"reduce-overhead"``: each layer's kernels replayed as one
    CUDA graph per input shape, see ``ScoringEngine(cuda_graphs=True)``)."""
    compiled = 0
    for layer in language_model.layers:
        if not _is_compiled(layer):
            layer._compiled_call_impl = _raising_clearly(
                torch.compile(layer._call_impl, dynamic=dynamic, fullgraph=True, mode=mode), hint
            )
        compiled += 1
    return compiled


def uncompile_decoder_layers(language_model: Any) -> int:
    """Undo `compile_decoder_layers`: the layers run eagerly again; returns how many were
    compiled. (Dynamo keeps its compiled code, so compiling again may reuse it.)"""
    undone = 0
    for layer in language_model.layers:
        if _is_compiled(layer):
            del layer._compiled_call_impl
            undone += 1
    return undone


def compiled_decoder_layers(language_model: Any) -> int:
    """How many of the language model's decoder layers `compile_decoder_layers` has compiled."""
    return sum(_is_compiled(layer) for layer in language_model.layers)
