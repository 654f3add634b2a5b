"""Phase 2 through the fast engine (micro-batches from worker processes, vision features cached per
clip, right padding) gives the plain path's numbers, on the tiny model on CPU."""

from __future__ import annotations

import pytest

from tests.rigel.release_support import (
    assert_same_phase2_training,
    comparable_phase2_config,
    phase2_on_a_fresh_tiny_backbone,
    small_phase2_release,
)
from training_bridge.rigel import fused
from training_bridge.rigel.engine import ScoringEngine
from training_bridge.rigel.store import LocalStore


@pytest.mark.parametrize("lazy", [True])
def test_engine_phase2_matches_the_plain_step(tmp_path, monkeypatch, lazy: bool) -> None:  # type: ignore[no-untyped-def]
    store = LocalStore(tmp_path)
    records = small_phase2_release(store, "releases/5", seed=5)
    config = comparable_phase2_config()

    def run(with_engine: bool):  # type: ignore[no-untyped-def]
        result, lora, _ = phase2_on_a_fresh_tiny_backbone(
            store,
            records,
            config,
            engine_factory=(lambda b: ScoringEngine(b, None, num_workers=0))
            if with_engine
            else None,
            lazy=lazy and with_engine,
        )
        return result, lora

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
    assert plain.steps == 3  # 12 samples at a global batch of 4
    # The frozen vision tower ran once per clip (3 clips), not once per sample (12).
    assert sum(vision_rows) == 3
    # ... in one call: the new clips of the next micro-batches go through it together
    assert len(vision_rows) == 1
    assert_same_phase2_training(plain, plain_lora, fast, fast_lora)
