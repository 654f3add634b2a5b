"""ScoringEngine with still images (T = 1, the image path) mixed with videos: the same numbers as
build_batch + the model's own forward, per sample and on the shared-prefix path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.engine import ScoringEngine
from training_bridge.rigel.inputs import RigelExample, build_batch


@pytest.fixture
def tiny():  # type: ignore[no-untyped-def]
    backbone = load_backbone("tiny", device="cpu", seed=1)
    yield backbone
    fused.restore()


class Head(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(hidden, 5)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden)


def _mixed() -> list[RigelExample]:
    """Two images with three candidates each (one shared prefix per image), two videos (the first
    with two candidates) and an image alone, interleaved."""
    rng = np.random.default_rng(5)
    pictures = [
        rng.integers(0, 256, (1, 64, 96, 3), dtype=np.uint8),
        rng.integers(0, 256, (1, 50, 70, 3), dtype=np.uint8),
    ]
    videos = [rng.integers(0, 256, (4, 64, 64, 3), dtype=np.uint8) for _ in range(2)]
    references = ["a dog runs on the grass .", "a brown dog plays ."]
    examples = []
    for k, candidate in enumerate(["a dog", "a dog runs on grass", "a cat sleeps on a sofa ."]):
        for picture in pictures:
            examples.append(RigelExample(references, candidate, frames=picture, modality="image"))
        examples.append(RigelExample(references, candidate, frames=videos[k % 2]))
    examples.append(RigelExample(["alone ."], "alone", frames=pictures[0].copy(), modality="image"))
    return examples


def _reference(tiny, examples):  # type: ignore[no-untyped-def]
    with torch.no_grad():
        rows = []
        for example in examples:
            out = tiny.model(
                **build_batch([example], tiny, reference_free=False), output_hidden_states=True
            )
            rows.append((out.hidden_states[-1][0, -1], out.logits[0, -1, tiny.score_token_ids]))
    return torch.stack([h for h, _ in rows]).numpy(), torch.stack([s for _, s in rows]).numpy()


@pytest.mark.parametrize("share_prefix", [True, False])
def test_engine_scores_images_and_videos_as_the_model_does(tiny, share_prefix: bool) -> None:  # type: ignore[no-untyped-def]
    examples = _mixed()
    hidden, logits = _reference(tiny, examples)
    engine = ScoringEngine(
        tiny, Head(tiny.hidden_size), batch_size=4, loader_batch=2, num_workers=0,
        share_prefix=share_prefix,
    )  # fmt: skip
    result = engine.run(examples)
    assert np.abs(result.hidden - hidden).max() < 1e-4
    assert np.abs(result.score_logits - logits).max() < 1e-4
    if share_prefix:  # the two images (three candidates each) and the video with two
        assert result.stats["shared_clips"] == 3
        assert result.stats["shared_samples"] == 3 + 3 + 2


def test_engine_phase2_on_a_clip_and_image_mix_matches_the_plain_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.rigel.release_support import (
        add_image_records,
        assert_same_phase2_training,
        comparable_phase2_config,
        phase2_on_a_fresh_tiny_backbone,
        write_release,
    )
    from training_bridge.rigel.data import read_release
    from training_bridge.rigel.store import LocalStore

    store = LocalStore(tmp_path)
    write_release(
        store, "releases/m", clips={"train": 2, "validation": 1}, candidates_per_clip=3, seed=8
    )
    add_image_records(store, "releases/m", "train", images=2, seed=8)
    records = read_release(store, "releases/m")["train"]
    assert sum(r.is_image for r in records) == 6 and len(records) == 12
    config = comparable_phase2_config()
    try:
        plain, plain_lora, _ = phase2_on_a_fresh_tiny_backbone(store, records, config)
        fast, fast_lora, _ = phase2_on_a_fresh_tiny_backbone(
            store,
            records,
            config,
            engine_factory=lambda b: ScoringEngine(b, None, num_workers=0),
            lazy=True,
        )
    finally:
        fused.restore()
    assert plain.steps == 3 and plain.samples == 12  # one epoch of each modality, mixed
    assert_same_phase2_training(plain, plain_lora, fast, fast_lora)
