"""The vision tower's batched attention within temporal groups."""

from __future__ import annotations

import torch

from training_bridge.rigel.engine.attention import _uniform_chunk_attention


def test_uniform_chunk_attention_equals_per_chunk_sdpa() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 12, 8) for _ in range(3))
    cu = torch.tensor([0, 4, 8, 12])
    out, _ = _uniform_chunk_attention(None, q, k, v, scaling=0.3, cu_seq_lens_q=cu)
    ragged, _ = _uniform_chunk_attention(
        None, q, k, v, scaling=0.3, cu_seq_lens_q=torch.tensor([0, 5, 12])
    )
    for a, b, expected_out in ((0, 4, out), (4, 8, out), (0, 5, ragged), (5, 12, ragged)):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], scale=0.3
        )
        assert torch.allclose(expected_out[0, a:b], ref[0].transpose(0, 1), atol=1e-6)
