"""FP8 linears of the scoring engine (`engine.fp8`, `ScoringEngine(fp8=True)`), on the CPU with
the tiny model; the CUDA-graph path's GPU check is skipped without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.engine import ScoringEngine
from training_bridge.rigel.engine.fp8 import (
    Float8Linear,
    float8_linear_count,
    float8_linears,
    restore_linears,
)
from training_bridge.rigel.inputs import RigelExample
from training_bridge.rigel.pipeline import make_engine


@pytest.fixture
def tiny():  # type: ignore[no-untyped-def]
    backbone = load_backbone("tiny", device="cpu", seed=3)
    yield backbone
    restore_linears(backbone.model)
    fused.restore()


def _relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm())


@pytest.mark.parametrize("bias", [False, True])
def test_fp8_linear_is_the_linear_within_fp8_rounding(bias: bool) -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 128, bias=bias).to(torch.bfloat16)
    x = (torch.randn(3, 37, 256) * torch.logspace(-2, 1, 37)[None, :, None]).to(torch.bfloat16)
    fast = Float8Linear(linear)
    with torch.no_grad():
        out, ref = fast(x), linear(x)
    assert out.shape == ref.shape == (3, 37, 128) and out.dtype == torch.bfloat16
    error = _relative_error(out, ref)
    # e4m3 keeps 3 mantissa bits: a few per cent, per row whatever the row's scale; and not 0,
    # which would mean nothing was quantised
    assert 1e-3 < error < 0.06
    rows = (out.float() - ref.float()).norm(dim=-1) / ref.float().norm(dim=-1)
    assert float(rows.max()) < 0.1  # small rows as exact as large ones (rowwise scales)
    assert fast.weight_fp8.dtype == torch.float8_e4m3fn


def test_conversion_covers_the_language_model_and_vision_tower_and_restores(tiny) -> None:  # type: ignore[no-untyped-def]
    model = tiny.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    lm_layers = len(model.model.language_model.layers)
    visual = model.model.visual
    vision = 4 * len(visual.blocks) + 2 * (1 + len(visual.deepstack_merger_list))
    assert float8_linears(model, ("language",)) == 7 * lm_layers
    assert float8_linear_count(model) == 7 * lm_layers
    assert float8_linears(model) == 7 * lm_layers + vision  # the language model's already done
    assert float8_linear_count(model) == 7 * lm_layers + vision
    assert isinstance(model.lm_head, torch.nn.Linear)  # left in full precision
    assert restore_linears(model) == 7 * lm_layers + vision
    assert float8_linear_count(model) == 0
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def _examples(n: int) -> list[RigelExample]:
    rng = np.random.default_rng(5)
    return [
        RigelExample(
            references=["a dog runs on the grass ."] * (1 + k % 3),
            candidate="a dog " * (2 + k % 4),
            frames=rng.integers(0, 256, (8, 64, 64, 3), dtype=np.uint8),
        )
        for k in range(n)
    ]


def test_engine_fp8_is_off_by_default_and_close_to_full_precision(tiny) -> None:  # type: ignore[no-untyped-def]
    examples = _examples(6)
    plain = ScoringEngine(tiny, batch_size=3, num_workers=0)
    assert plain.fp8 is False and float8_linear_count(tiny.model) == 0
    reference = plain.run(examples)
    engine = ScoringEngine(
        tiny, batch_size=3, num_workers=0, fp8=True, fp8_parts=("language", "vision")
    )
    assert float8_linear_count(tiny.model) > 0
    out = engine.run(examples)
    engine.close()
    assert float8_linear_count(tiny.model) == 0
    error = _relative_error(torch.from_numpy(out.hidden), torch.from_numpy(reference.hidden))
    assert 0 < error < 0.1
    again = ScoringEngine(tiny, batch_size=3, num_workers=0).run(examples)
    assert np.array_equal(again.hidden, reference.hidden)  # close() left the model as it was


def test_the_run_setting_turns_fp8_on_and_is_off_by_default(tiny) -> None:  # type: ignore[no-untyped-def]
    assert RigelConfig().engine_fp8 is False
    with pytest.raises(ValueError, match="engine_fp8 must be true or false"):
        RigelConfig(engine_fp8="yes")  # type: ignore[arg-type]
    config = RigelConfig(engine="on", engine_compile="off", engine_workers=0)
    engine = make_engine(tiny, config, batch_size=2)
    assert engine is not None and not engine.fp8 and float8_linear_count(tiny.model) == 0
    engine = make_engine(tiny, config.replace(engine_fp8=True), batch_size=2)
    # the language model's linears only, by default (the eager vision tower is slower in FP8)
    layers = len(tiny.model.model.language_model.layers)
    assert engine is not None and engine.fp8 and float8_linear_count(tiny.model) == 7 * layers
    engine.close()
    assert float8_linear_count(tiny.model) == 0


def test_cuda_graphs_compile_the_layers_and_pad_to_64(tiny) -> None:  # type: ignore[no-untyped-def]
    engine = ScoringEngine(tiny, num_workers=0, cuda_graphs=True)
    try:
        assert engine.compile_layers and engine.pad_multiple == 64
        assert fused.compiled_decoder_layers(tiny.model.model.language_model) == len(
            tiny.model.model.language_model.layers
        )
    finally:
        engine.close()
    assert fused.compiled_decoder_layers(tiny.model.model.language_model) == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_cuda_graph_path_scores_as_the_eager_path() -> None:
    backbone = load_backbone("tiny", device="cuda", seed=3)
    examples = _examples(6)
    reference = ScoringEngine(backbone, batch_size=3, num_workers=0).run(examples)
    engine = ScoringEngine(backbone, batch_size=3, num_workers=0, cuda_graphs=True)
    try:
        out = engine.run(examples)
    finally:
        engine.close()
    assert np.allclose(out.hidden, reference.hidden, atol=1e-3, rtol=1e-3)
