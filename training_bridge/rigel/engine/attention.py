"""The vision tower's attention within temporal groups, as one batched SDPA call.

The vision tower packs every clip's patches into one sequence and attends within each temporal
group (``cu_seqlens``). All groups of an engine batch have the same size, so the groups become the
batch dimension of a single ``scaled_dot_product_attention`` call instead of one call per group.
The engine sets the group size for the duration of a vision forward (:func:`vision_chunk_length`);
otherwise it is read off ``cu_seq_lens_q``.

:func:`compile_vision_blocks` goes one step further for the scoring engine
(``ScoringEngine(compile_vision=True)``): while the group size is set, each vision block (LayerNorm,
QKV, rotary, attention, projection, residuals, MLP) runs as one graph compiled by
``torch.compile``, one graph serving every block, so its element-wise work (and FP8's activation
scaling, where the tower's linears are FP8) is fused instead of run as separate eager kernels.

No Django import.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

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


@contextlib.contextmanager
def vision_chunk_length(length: int | None) -> Iterator[None]:
    """Within this block the vision attention treats its packed sequence as chunks of ``length``
    tokens (``None``: read the chunks off ``cu_seq_lens_q``)."""
    token = _CHUNK_LENGTH.set(length)
    try:
        yield
    finally:
        _CHUNK_LENGTH.reset(token)


def enable_fast_vision_attention(model: Any) -> None:
    """Route the vision tower's attention through :func:`_uniform_chunk_attention`."""
    from transformers import AttentionInterface

    AttentionInterface.register(VISION_ATTENTION, _uniform_chunk_attention)
    model.model.visual.config._attn_implementation = VISION_ATTENTION


def _block_body(
    block: Any,
    hidden_states: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    chunk: int,
    rotary: Any,
) -> torch.Tensor:
    """One Qwen3-VL vision block over packed chunks of ``chunk`` tokens: transformers'
    ``Qwen3VLVisionBlock.forward`` with :func:`_uniform_chunk_attention`, written as one function
    of tensors so that it compiles whole (the same operations in the same order). ``rotary`` is
    transformers' ``apply_rotary_pos_emb_vision`` as it stands (fused or not), looked up outside
    (Dynamo does not trace transformers' lazy module imports)."""
    attn = block.attn
    total = hidden_states.shape[0]
    qkv = attn.qkv(block.norm1(hidden_states)).reshape(total, 3, attn.num_heads, -1)
    query, key, value = qkv.permute(1, 0, 2, 3).unbind(0)  # (total, heads, dim) each
    query, key = rotary(query, key, cos, sin)
    n = total // chunk

    def split(t: torch.Tensor) -> torch.Tensor:  # (chunks, heads, chunk, dim)
        return t.reshape(n, chunk, attn.num_heads, -1).transpose(1, 2)

    out = F.scaled_dot_product_attention(split(query), split(key), split(value), scale=attn.scaling)
    hidden_states = hidden_states + attn.proj(out.transpose(1, 2).reshape(total, -1))
    return hidden_states + block.mlp(block.norm2(hidden_states))


@functools.cache
def _compiled_body() -> Any:
    return torch.compile(_block_body, dynamic=True, fullgraph=True)


def _fast_block_forward(
    self: Any,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    chunk = _CHUNK_LENGTH.get()
    if chunk is None or position_embeddings is None or hidden_states.shape[0] % chunk:
        # groups of several sizes (or no size set): transformers' block, unchanged
        return type(self).forward(
            self,
            hidden_states,
            cu_seqlens=cu_seqlens,
            position_embeddings=position_embeddings,
            **kwargs,
        )
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    cos, sin = position_embeddings
    rotary = modeling_qwen3_vl.apply_rotary_pos_emb_vision
    return _compiled_body()(self, hidden_states, cos, sin, chunk, rotary)


def compile_vision_blocks(model: Any) -> int:
    """Run each block of ``model``'s vision tower through one compiled graph whenever the engine
    has set a uniform group size (:func:`vision_chunk_length`); returns how many blocks are set
    up so. Idempotent; :func:`uncompile_vision_blocks` undoes it."""
    blocks = model.model.visual.blocks
    for block in blocks:
        if "forward" not in block.__dict__:
            block.forward = types.MethodType(_fast_block_forward, block)
    return len(blocks)


def uncompile_vision_blocks(model: Any) -> int:
    """Undo :func:`compile_vision_blocks`; returns how many blocks were compiled."""
    undone = 0
    for block in model.model.visual.blocks:
        if block.__dict__.pop("forward", None) is not None:
            undone += 1
    return undone


def compiled_vision_blocks(model: Any) -> int:
    return sum("forward" in block.__dict__ for block in model.model.visual.blocks)
