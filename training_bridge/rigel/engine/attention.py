"""The vision tower's attention within temporal groups, as one batched SDPA call.

The vision tower packs every clip's patches into one sequence and attends within each temporal
group (``cu_seqlens``). All groups of an engine batch have the same size, so the groups become the
batch dimension of a single ``scaled_dot_product_attention`` call instead of one call per group.
The engine sets the group size for the duration of a vision forward (:func:`vision_chunk_length`);
otherwise it is read off ``cu_seq_lens_q``.

No Django import.
"""

from __future__ import annotations

import contextlib
import contextvars
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
