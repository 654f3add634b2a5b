"""Prompt layouts (issue 29): the candidate last, so every candidate of a clip shares the prompt up
to it; runs stored before layouts existed keep the order they were trained on."""

from __future__ import annotations

import numpy as np
import pytest

from training_bridge.rigel import prompts
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.config import RigelConfig, with_stored_layout
from training_bridge.rigel.engine.loading import common_prefix_length
from training_bridge.rigel.inputs import RigelExample, encode_text
from training_bridge.rigel.run_context import RunSpec, load_backbone_for
from training_bridge.rigel.teacher import prompt_version
from training_bridge.rigel.video import DecodedVideo

REFERENCES = ["a man throws a ball against a wall .", "someone plays handball alone ."]
CANDIDATES = ["a man throws a ball", "a woman is cooking pasta in a small kitchen"]


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    return load_backbone("tiny", device="cpu", seed=0)


def test_both_layouts_hold_the_same_parts_in_their_own_order() -> None:
    texts = {
        layout: prompts.prompt_text(
            references=REFERENCES, candidate="a cat", reference_free=False, layout=layout
        )
        for layout in prompts.PROMPT_LAYOUTS
    }
    parts = {layout: sorted(text.split("\n\n")) for layout, text in texts.items()}
    assert parts[prompts.CANDIDATE_LAST] == parts[prompts.LEGACY_LAYOUT]
    assert texts[prompts.CANDIDATE_LAST].endswith("Candidate caption: a cat")
    legacy = texts[prompts.LEGACY_LAYOUT]
    assert legacy.index("Candidate caption:") < legacy.index("1 (Bad):")
    assert prompts.DEFAULT_LAYOUT == prompts.CANDIDATE_LAST
    with pytest.raises(ValueError, match="unknown prompt layout"):
        prompts.prompt_text(references=[], candidate="x", reference_free=True, layout="sideways")


def _suffixes(backbone, layout: str, reference_free: bool) -> list[str]:  # type: ignore[no-untyped-def]
    """What each candidate's token ids add after the prefix its clip's candidates share."""
    backbone.prompt_layout = layout
    frames = np.random.default_rng(3).integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)
    video = DecodedVideo(frames=frames, indices=np.arange(4), fps=25.0, total_frames=4)
    ids = [
        encode_text(
            RigelExample(references=REFERENCES, candidate=candidate, frames=frames),
            video,
            backbone,
            reference_free=reference_free,
        )[0]
        for candidate in CANDIDATES
    ]
    cut = common_prefix_length(ids)
    return [backbone.tokenizer.decode(row[cut:]) for row in ids]


@pytest.mark.parametrize("reference_free", [False, True])
def test_candidate_last_leaves_only_the_candidate_after_the_shared_prefix(
    tiny, reference_free: bool
) -> None:  # type: ignore[no-untyped-def]
    rubric_words = "Comprehensively and accurately describes"
    try:
        new = _suffixes(tiny, prompts.CANDIDATE_LAST, reference_free)
        old = _suffixes(tiny, prompts.LEGACY_LAYOUT, reference_free)
    finally:
        tiny.prompt_layout = prompts.DEFAULT_LAYOUT
    for suffix, candidate in zip(new, CANDIDATES, strict=True):
        assert rubric_words not in suffix
        # the candidate's words (the shared prefix may end inside its first word) and the
        # turn's end: nothing of the instructions
        assert candidate.split()[-1] in suffix and "Reply with one digit" not in suffix
        assert len(suffix) < len(candidate) + 40
    # the order of the runs trained before runs the rubric after every candidate
    assert all(rubric_words in suffix for suffix in old)


def test_stored_settings_without_a_layout_are_the_legacy_order() -> None:
    assert RigelConfig().prompt_layout == prompts.CANDIDATE_LAST
    old = RigelConfig().to_dict()
    del old["prompt_layout"]
    assert RigelConfig.from_dict(with_stored_layout(old)).prompt_layout == prompts.LEGACY_LAYOUT
    spec = {
        "run_prefix": "runs/1",
        "release_prefix": "releases/1",
        "release_key": "r1",
        "config": {"backbone": "tiny"},
    }
    assert RunSpec.from_dict(spec).config.prompt_layout == prompts.LEGACY_LAYOUT
    spec["config"] = {"backbone": "tiny", "prompt_layout": prompts.CANDIDATE_LAST}
    assert RunSpec.from_dict(spec).config.prompt_layout == prompts.CANDIDATE_LAST
    with pytest.raises(ValueError, match="prompt_layout must be one of"):
        RigelConfig(prompt_layout="sideways")


def test_a_run_loads_its_backbone_with_its_layout() -> None:
    from training_bridge.rigel.distributed import Distributed

    config = RigelConfig(backbone="tiny", prompt_layout=prompts.LEGACY_LAYOUT)
    assert load_backbone_for(config, Distributed()).prompt_layout == prompts.LEGACY_LAYOUT


def test_teacher_caches_keep_their_keys_under_the_legacy_layout() -> None:
    # the keys the previous code (bfe1745, no layouts) gave: the caches of stored runs stay valid
    legacy = prompts.LEGACY_LAYOUT
    assert prompt_version(reference_free=True, frames=4, layout=legacy) == "p5db017f8fc-free-f4"
    assert prompt_version(reference_free=False, frames=8, layout=legacy) == "pfdec2cbe86-ref-f8"
    assert (
        prompt_version(
            reference_free=False, frames=2, frame_pixels=9216, images=True, layout=legacy
        )
        == "p1649ef692b-ref-f2-px9216"
    )
    assert prompt_version(reference_free=True, frames=4) != "p5db017f8fc-free-f4"
