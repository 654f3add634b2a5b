"""FLOP accounting of the engine's forwards, on the 2B model's configuration."""

from __future__ import annotations

import pytest

from training_bridge.rigel.backbone import qwen3_vl_2b_config
from training_bridge.rigel.engine.flops import forward_flops, shared_prefix_flops


def test_forward_flops_counts_the_2b_workload() -> None:
    flops = forward_flops(qwen3_vl_2b_config(), seq_len=944, patches=1936, chunk=484)
    # language model: 2 * 1.41e9 matmul weights per token
    assert flops["lm_linear"] == pytest.approx(2 * 28 * 50_331_648 * 944)
    assert 3.9e12 < flops["total"] < 4.3e12


def test_shared_prefix_flops_counts_the_prefix_once() -> None:
    config = qwen3_vl_2b_config()
    one = forward_flops(config, seq_len=956, patches=1936, chunk=484)
    shared = shared_prefix_flops(
        config, prefix_lengths=[741], suffix_lengths=[215] * 6, owner=[0] * 6,
        patches=1936, chunk=484,
    )  # fmt: skip
    assert shared["vision_linear"] == pytest.approx(one["vision_linear"])
    assert shared["lm_linear"] == pytest.approx(one["lm_linear"] * (741 + 6 * 215) / 956)
    # a single candidate costs exactly the whole sequence
    single = shared_prefix_flops(
        config, prefix_lengths=[741], suffix_lengths=[215], owner=[0], patches=1936, chunk=484
    )
    assert single["total"] == pytest.approx(one["total"])
