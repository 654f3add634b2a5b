"""FLOP accounting of the engine's forwards: matmul FLOPs (2 per multiply-add), split by part,
for one sample (:func:`forward_flops`) and for one shared-prefix batch
(:func:`shared_prefix_flops`). The benchmarks divide them by the measured time (docs/benchmarks.md).

No Django import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _language_linear_flops_per_token(text_config: Any) -> int:
    """Matmul FLOPs of one token through one decoder layer's projections (attention and MLP)."""
    t = text_config
    q = t.num_attention_heads * t.head_dim
    kv = t.num_key_value_heads * t.head_dim
    return 2 * (
        t.hidden_size * (q + 2 * kv) + q * t.hidden_size + 3 * t.hidden_size * t.intermediate_size
    )


def forward_flops(
    config: Any, *, seq_len: float, patches: float, chunk: float, causal: bool = True
) -> dict[str, float]:
    """Matmul FLOPs of one forward of one sample (2 per multiply-add), split by part."""
    t = config.text_config
    v = config.vision_config
    q = t.num_attention_heads * t.head_dim
    per_token = _language_linear_flops_per_token(t)
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
    per_token = _language_linear_flops_per_token(t)
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
