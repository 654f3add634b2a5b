"""Phase 2 through the fast engine (micro-batches from worker processes, vision features cached per
clip, right padding) gives the plain path's numbers, on the tiny model on CPU."""

from __future__ import annotations

import pytest
import torch

from tests.training_bridge.release_support import tiny_settings, write_release
from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.data import ExampleLoader, read_release
from training_bridge.rigel.engine import ScoringEngine
from training_bridge.rigel.head import build_head
from training_bridge.rigel.phase2 import apply_lora, lora_state, train_phase2
from training_bridge.rigel.store import LocalStore


@pytest.mark.parametrize("lazy", [True])
def test_engine_phase2_matches_the_plain_step(tmp_path, monkeypatch, lazy: bool) -> None:  # type: ignore[no-untyped-def]
    store = LocalStore(tmp_path)
    write_release(
        store, "releases/5", clips={"train": 3, "validation": 1}, candidates_per_clip=4, seed=5
    )
    records = read_release(store, "releases/5")["train"]
    config = RigelConfig(
        backbone="tiny",
        **tiny_settings(phase2_batch_size=4, phase2_micro_batch_size=2),
        lora_dropout=0.0,
    )

    def run(with_engine: bool):  # type: ignore[no-untyped-def]
        torch.manual_seed(0)
        backbone = load_backbone("tiny", device="cpu")
        head = build_head(backbone.hidden_size, seed=0)
        apply_lora(backbone, config)
        engine = ScoringEngine(backbone, None, num_workers=0) if with_engine else None
        result = train_phase2(
            backbone=backbone,
            head=head,
            loader=ExampleLoader(store, frames=4, lazy=lazy and with_engine),
            records=records,
            config=config,
            engine=engine,
        )
        return result, lora_state(backbone.extra["peft_model"])

    vision_rows: list[int] = []
    original = ScoringEngine.vision_features

    def counting(self, pixel_values, grid_thw, grids_cpu):  # type: ignore[no-untyped-def]
        vision_rows.append(len(grids_cpu))
        return original(self, pixel_values, grid_thw, grids_cpu)

    monkeypatch.setattr(ScoringEngine, "vision_features", counting)
    try:
        plain, plain_lora = run(False)
        fast, fast_lora = run(True)
    finally:
        fused.restore()
    assert plain.steps == fast.steps == 3  # 12 samples at a global batch of 4
    # The frozen vision tower ran once per clip (3 clips), not once per sample (12).
    assert sum(vision_rows) == 3
    assert fast.mean_loss == pytest.approx(plain.mean_loss, rel=1e-5)
    assert [h["loss"] for h in fast.history] == pytest.approx(
        [h["loss"] for h in plain.history], rel=1e-5
    )
    for name, tensor in plain_lora.items():
        torch.testing.assert_close(fast_lora[name], tensor, rtol=1e-4, atol=1e-6)
    assert any(float(t.abs().sum()) > 0 for k, t in fast_lora.items() if "lora_B" in k)
