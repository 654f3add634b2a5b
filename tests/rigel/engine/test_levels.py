"""The two-level prefix (`engine/levels.py`): a clip under three protocols (reference-free, 1-ref,
all-refs) runs its shared part (the video in it) through the language model once, each protocol's
own part on top of it, then the packed candidates; on the tiny model on CPU in float32 it gives
the single-level path's and the model's own hidden states, and a wrong position or mask on the
second level does not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.engine import ScoringEngine, levels
from training_bridge.rigel.engine.loading import common_prefix_length
from training_bridge.rigel.engine.prefix import bundle_cuts
from training_bridge.rigel.inputs import (
    RigelExample,
    build_batch,
    encode_text,
    load_video,
    mm_token_type_ids,
)

PROTOCOLS = ((True, 0), (False, 1), (False, 3))  # (reference-free, references): rf, 1-ref, all


@pytest.fixture
def tiny():  # type: ignore[no-untyped-def]
    backbone = load_backbone("tiny", device="cpu", seed=1)
    yield backbone
    fused.restore()


def _together() -> list[RigelExample]:
    """Three clips (6, 2 and 6 candidates; two frame shapes and lengths) under the three
    protocols, each sample with its own setting, as `ProtocolScorer.score_together` sends them:
    protocol after protocol, the clips in the same order in each."""
    rng = np.random.default_rng(7)
    frames = [
        rng.integers(0, 256, (8, 64, 64, 3), dtype=np.uint8),
        rng.integers(0, 256, (8, 64, 96, 3), dtype=np.uint8),
        rng.integers(0, 256, (6, 64, 64, 3), dtype=np.uint8),
    ]
    words = ["a man throws a ball .", "a dog runs", "two people talk in a room", "a", "red ."]
    base = [
        (clip, [f"reference {clip} number {j} about a ball ." for j in range(3)], words[k % 5])
        for clip in range(3)
        for k in range(6 if clip != 1 else 2)
    ]
    return [
        RigelExample(refs[:count], text, frames=frames[clip], reference_free=free)
        for free, count in PROTOCOLS
        for clip, refs, text in base
    ]


def _plain_hidden(backbone: Any, examples: list[RigelExample]) -> np.ndarray:
    """The model's own forward, sample by sample: the last hidden state at the answer."""
    with torch.no_grad():
        return np.stack(
            [
                backbone.model(
                    **build_batch([e], backbone, reference_free=bool(e.reference_free)),
                    output_hidden_states=True,
                )
                .hidden_states[-1][0, -1]
                .numpy()
                for e in examples
            ]
        )


def _engine(backbone: Any, two_level: bool) -> ScoringEngine:
    # worker batches of 2 bundles (18 + 6 candidates, then 18): a batch with one clip alone
    engine = ScoringEngine(backbone, None, batch_size=16, group_loader_batch=2, num_workers=0)
    engine.two_level_prefix = two_level
    return engine


def test_two_levels_give_the_single_level_and_the_plain_hidden_states(tiny) -> None:  # type: ignore[no-untyped-def]
    examples = _together()
    two = _engine(tiny, True).run(examples)
    one = _engine(tiny, False).run(examples)
    assert two.stats["two_level_batches"] == two.stats["batches"] > 1
    assert one.stats["two_level_batches"] == 0
    assert np.abs(two.hidden - one.hidden).max() < 1e-5
    assert np.abs(two.score_logits - one.score_logits).max() < 1e-5
    assert np.abs(two.hidden - _plain_hidden(tiny, examples)).max() < 1e-5
    # the protocols' scores differ: the levels kept each protocol's own part
    n = len(examples) // 3
    assert np.abs(two.hidden[:n] - two.hidden[n : 2 * n]).max() > 1e-3
    assert np.abs(two.hidden[n : 2 * n] - two.hidden[2 * n :]).max() > 1e-3


def test_two_levels_count_what_they_execute(tiny) -> None:  # type: ignore[no-untyped-def]
    """The video's tokens run once per clip instead of once per protocol; the shared part is
    what the three prompts of a clip have in common (computed here from the prompts' ids), and
    each protocol's prefix costs its length minus that part."""
    examples = _together()
    two = _engine(tiny, True).run(examples).stats
    one = _engine(tiny, False).run(examples).stats
    assert one["video_tokens"] == 3 * two["video_tokens"]
    shared = video = 0
    for clip in range(3):
        same_clip = [e for e in examples if e.frames is examples[clip * 6].frames]
        video_input = load_video(same_clip[0], tiny.vision)
        per_protocol = [same_clip[k * len(same_clip) // 3] for k in range(3)]
        ids = [
            encode_text(e, video_input, tiny, reference_free=bool(e.reference_free))[0]
            for e in per_protocol
        ]
        cut = common_prefix_length(ids)
        shared += cut
        types = mm_token_type_ids(ids[0], tiny)
        video += int((types != 0).sum())
        assert not types[cut:].any()  # the video is in the shared part
    assert two["shared_prefix_tokens"] == shared
    assert two["video_tokens"] == video
    assert one["prefix_tokens"] - two["prefix_tokens"] == 2 * shared
    assert one["suffix_tokens"] == two["suffix_tokens"]
    assert two["tokens"] == two["prefix_tokens"] + two["suffix_tokens"]
    assert one["tokens"] - two["tokens"] == 2 * shared


def _wrong_positions(original: Any) -> Any:
    """Level 2 with the positions a 1-D model would give (the token's index in the sequence)
    instead of Qwen3-VL's M-RoPE positions, which the video's tokens compress."""

    def parts(batch: Any) -> Any:
        ids, _, lengths = original(batch)
        assert batch.shared_lengths is not None
        index = batch.shared_lengths.view(-1, 1) + torch.arange(ids.shape[1]).view(1, -1)
        return ids, index.unsqueeze(0).expand(3, -1, -1).contiguous(), lengths

    return parts


def _level_two_sees_every_protocol(original: Any) -> Any:
    """Level 3's mask open on every column some candidate of the batch sees: a candidate sees
    the other protocols' parts of level 2 too."""

    def pack(*args: Any, prefix_visible: Any = None, **kwargs: Any) -> Any:
        if prefix_visible is not None:
            prefix_visible = prefix_visible | prefix_visible.any(0, keepdim=True)
        return original(*args, prefix_visible=prefix_visible, **kwargs)

    return pack


@pytest.mark.parametrize("bug", ["positions", "mask"])
def test_a_wrong_second_level_is_caught(tiny, monkeypatch, bug: str) -> None:  # type: ignore[no-untyped-def]
    """The comparison above can fail: planted bugs on the second level move the hidden
    states far beyond 1e-5."""
    examples = _together()
    one = _engine(tiny, False).run(examples)
    if bug == "positions":
        monkeypatch.setattr(levels, "own_parts", _wrong_positions(levels.own_parts))
    else:
        monkeypatch.setattr(
            levels, "pack_suffixes", _level_two_sees_every_protocol(levels.pack_suffixes)
        )
    two = _engine(tiny, True).run(examples)
    assert two.stats["two_level_batches"] > 0
    assert np.abs(two.hidden - one.hidden).max() > 1e-3


def test_bundle_cuts() -> None:
    """The shared part ends where a bundle's prefixes differ; a group alone keeps its whole
    prefix; prefixes that differ before the end of the video are not bundled."""
    v = 9  # the video pad
    a, b, c = torch.tensor([1, v, v, 2, 3, 4]), torch.tensor([1, v, v, 2, 5]), torch.tensor([7, 8])
    numbers, cuts = bundle_cuts([[a, b], [c]], [v])
    assert numbers == [0, 0, 1] and cuts == [4, 4, 2]
    numbers, cuts = bundle_cuts([[a, torch.tensor([1, v, 6, v, 2])]], [v])
    assert numbers == [0, 1] and cuts == [6, 5]
