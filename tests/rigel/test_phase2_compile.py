"""Phase 2 with compiled decoder layers (`phase2_compile`) trains to the eager run's numbers, on the
tiny model on CPU (inductor's C++ kernels, built with the system's gcc)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from tests.rigel.release_support import (
    assert_same_phase2_training,
    comparable_phase2_config,
    phase2_on_a_fresh_tiny_backbone,
    small_phase2_release,
)
from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.config import PHASE2_COMPILE_MIN_SAMPLES, RigelConfig
from training_bridge.rigel.store import LocalStore


def test_phase2_compile_setting_is_validated_and_follows_the_device():
    assert RigelConfig().phase2_compile == "auto"
    many = PHASE2_COMPILE_MIN_SAMPLES
    assert not RigelConfig().compiles_phase2("cpu", many)
    assert RigelConfig(device="cuda").compiles_phase2("cuda", many)
    # a short run on CUDA: the compile would cost more than it saves
    assert not RigelConfig(device="cuda").compiles_phase2("cuda", many - 1)
    assert RigelConfig(phase2_compile="on").compiles_phase2("cpu", 1)
    assert not RigelConfig(device="cuda", phase2_compile="off").compiles_phase2("cuda", many)
    with pytest.raises(ValueError, match="phase2_compile must be auto, on or off"):
        RigelConfig(phase2_compile="yes")
    config = RigelConfig(phase2_compile="off")
    assert RigelConfig.from_dict(config.to_dict()) == config


def test_compile_decoder_layers_is_idempotent_and_undone():
    backbone = load_backbone("tiny", device="cpu")
    language_model = backbone.model.model.language_model
    assert fused.compile_decoder_layers(language_model) == 2
    compiled_calls = [layer._compiled_call_impl for layer in language_model.layers]
    assert fused.compile_decoder_layers(language_model) == 2
    assert [layer._compiled_call_impl for layer in language_model.layers] == compiled_calls
    assert fused.uncompile_decoder_layers(language_model) == 2
    assert fused.compiled_decoder_layers(language_model) == 0
    assert all(layer._compiled_call_impl is None for layer in language_model.layers)


def test_a_graph_break_in_a_decoder_layer_is_an_error_not_a_partial_compile(monkeypatch):
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    original = modeling_qwen3_vl.Qwen3VLTextMLP.forward

    def breaking(self, x):  # type: ignore[no-untyped-def]
        torch._dynamo.graph_break()
        return original(self, x)

    monkeypatch.setattr(modeling_qwen3_vl.Qwen3VLTextMLP, "forward", breaking)
    backbone = load_backbone("tiny", device="cpu")
    language_model = backbone.model.model.language_model
    fused.compile_decoder_layers(language_model)
    hidden = torch.randn(1, 5, backbone.hidden_size)
    positions = torch.arange(5).view(1, 1, -1).expand(3, 1, -1)
    rotary = language_model.rotary_emb(hidden, positions)
    try:
        with pytest.raises(fused.LayerCompileError, match="phase2_compile='off'"):
            language_model.layers[0](hidden, position_embeddings=rotary, attention_mask=None)
    finally:
        torch._dynamo.reset()


@pytest.mark.slow  # inductor builds its C++ kernels: 40-70 s on two cores with a cold cache
def test_compiled_phase2_matches_eager_with_one_graph_for_all_layers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = LocalStore(tmp_path)
    records = small_phase2_release(store, "releases/7", seed=7)

    def run(phase2_compile: str):  # type: ignore[no-untyped-def]
        config = comparable_phase2_config(phase2_compile=phase2_compile)
        result, lora, backbone = phase2_on_a_fresh_tiny_backbone(store, records, config)
        return result, lora, backbone.model.model.language_model

    torch._dynamo.reset()
    counters.clear()
    eager, eager_lora, eager_layers = run("off")
    assert fused.compiled_decoder_layers(eager_layers) == 0
    assert counters["stats"]["unique_graphs"] == 0
    try:
        compiled, compiled_lora, compiled_layers = run("on")
        assert fused.compiled_decoder_layers(compiled_layers) == 2
        # Six micro-batches of different lengths through two layers, compiled twice in all: the
        # first layer (its input needs no gradient) and the second; no graph break.
        assert counters["stats"]["unique_graphs"] == 2
        assert not counters["graph_break"]
    finally:
        torch._dynamo.reset()
    assert eager.steps == 3  # 12 samples at a global batch of 4
    assert_same_phase2_training(eager, eager_lora, compiled, compiled_lora)
