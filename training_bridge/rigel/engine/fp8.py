"""FP8 matrix products for the scoring engine (opt-in: ``ScoringEngine(fp8=True)``).

Each selected ``nn.Linear`` of the language model's decoder layers and of the vision tower (its
blocks and patch mergers) is replaced by :class:`Float8Linear`: the weight is stored once in
float8 e4m3 with one scale per output row, each call scales the activations per row (dynamic,
from the row's absolute maximum), and ``torch._scaled_mm`` multiplies the two in FP8 with float32
accumulation and a bf16 (the input's dtype) result. Rowwise scales keep the error at the level of
e4m3's 3-bit mantissa on each product; the bias, where there is one, is added afterwards.

Left in bf16: the LM head (the engine reads five of its rows only), the embeddings, the vision
patch embedding, attention itself and the norms; and any linear whose input or output width is not
a multiple of 16 (``torch._scaled_mm``'s rule). :func:`restore_linears` puts the original modules
back (they are kept, so the bf16 weights stay in memory while FP8 is on).

Inference only (no gradient flows through the quantisation). No Django import.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
PARTS = ("language", "vision")


def _rowwise_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / scale in e4m3, scale (rows, 1) float32), one scale per row of a 2-D tensor."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    scale = amax / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale


# One fused kernel for the activations' scaling on the GPU when the caller runs eagerly (the
# vision tower); inside a compiled decoder layer it is traced inline like the rest.
_rowwise_fp8_gpu = torch.compile(_rowwise_fp8, dynamic=True)


class Float8Linear(nn.Module):
    """``original(x)`` computed as an FP8 matrix product with rowwise scales."""

    weight_fp8: torch.Tensor
    weight_scale: torch.Tensor

    def __init__(self, original: nn.Linear):
        super().__init__()
        weight = original.weight.detach()
        quantised, scale = _rowwise_fp8(weight)
        self.in_features = original.in_features
        self.out_features = original.out_features
        self.register_buffer("weight_fp8", quantised, persistent=False)  # (out, in)
        self.register_buffer("weight_scale", scale.T.contiguous(), persistent=False)  # (1, out)
        self.bias = original.bias
        # Not a submodule (it would show in named_modules/state_dict twice): restore_linears()
        # puts it back.
        self.__dict__["original"] = original

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features)
        quantised, scale = (_rowwise_fp8_gpu if flat.is_cuda else _rowwise_fp8)(flat)
        out_dtype = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        out = torch._scaled_mm(
            quantised,
            self.weight_fp8.T,  # column-major, as _scaled_mm wants its second operand
            scale_a=scale,
            scale_b=self.weight_scale,
            out_dtype=out_dtype,
        )
        if self.bias is not None:
            out = out + self.bias.to(out_dtype)
        return out.to(x.dtype).reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp8=e4m3"


def eligible(linear: nn.Module) -> bool:
    """A plain ``nn.Linear`` (not a LoRA wrapper) whose widths suit ``torch._scaled_mm``."""
    return (
        type(linear) is nn.Linear and linear.in_features % 16 == 0 and linear.out_features % 16 == 0
    )


def _containers(model: Any, parts: Iterable[str]) -> Iterator[nn.Module]:
    inner = model.model
    for part in parts:
        if part == "language":
            yield from inner.language_model.layers
        elif part == "vision":
            visual = inner.visual
            yield from visual.blocks
            yield visual.merger
            yield from getattr(visual, "deepstack_merger_list", [])
        else:
            raise ValueError(f"unknown part {part!r}; expected one of {PARTS}")


def float8_linears(model: Any, parts: Iterable[str] = PARTS) -> int:
    """Replace the eligible linears of ``parts`` of a Qwen3-VL model (``language``: the decoder
    layers; ``vision``: the vision blocks and mergers) by :class:`Float8Linear`, in place; returns
    how many were replaced (those already in FP8 count too)."""
    replaced = 0
    for container in _containers(model, tuple(parts)):
        for name, module in list(container.named_modules()):
            if isinstance(module, Float8Linear):
                replaced += 1
                continue
            if not name or not eligible(module):
                continue
            parent_name, _, child = name.rpartition(".")
            parent = container.get_submodule(parent_name) if parent_name else container
            setattr(parent, child, Float8Linear(module))
            replaced += 1
    return replaced


def restore_linears(model: Any) -> int:
    """Undo :func:`float8_linears` everywhere in ``model``; returns how many were restored."""
    restored = 0
    for name, module in list(model.named_modules()):
        if isinstance(module, Float8Linear):
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, module.original)
            restored += 1
    return restored


def float8_linear_count(model: Any) -> int:
    return sum(isinstance(m, Float8Linear) for m in model.modules())
