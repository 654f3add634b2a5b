"""The visual-input presets (issue 26, point 2): "paper-budget" costs about the paper's 770 GFLOPs
per inference (Appendix D, line 239 of the seed text) by the project's own FLOP counter
(`engine.flops.forward_flops`, 2 FLOPs per multiply-add) on Qwen3-VL-2B-Instruct's architecture
(`local_backbones.qwen3_vl_2b_config()`, no weights), with our reference-free prompt; and the pipeline
really feeds the backbone that input.

The prompt is counted with the large locally built byte-level BPE tokenizer the GPU benchmarks use
(`build_tokenizer("large")`, trained on VATEX-EVAL captions; Qwen's own tokenizer is not here), the
candidate a 14-word VATEX-style caption. Tolerance: within 5 % of 770 GFLOPs for a 4:3 and a 16:9
source (measured 765 and 776).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tests.rigel.oracles import expand_prompt, video_placeholder
from training_bridge.rigel.backbone import QWEN3_VL_HUB_VIDEO, load_backbone, with_frame_budget
from training_bridge.rigel.config import (
    PAPER_GFLOPS_PER_INFERENCE,
    PRESETS,
    RigelConfig,
    preset_name,
)
from training_bridge.rigel.distributed import Distributed
from training_bridge.rigel.engine.flops import forward_flops
from training_bridge.rigel.inputs import RigelExample, build_batch
from training_bridge.rigel.local_backbones import build_tokenizer, qwen3_vl_2b_config, special_ids
from training_bridge.rigel.pipeline import load_backbone_for
from training_bridge.rigel.prompts import render_prompt
from training_bridge.rigel.video import grid_thw, target_size

CANDIDATE = "a man is playing a guitar while sitting on a couch in his living room"
FPS = 24.0


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return build_tokenizer("large")


def inference_gflops(tokenizer, *, preset: str, height: int, width: int, references: list[str]):  # type: ignore[no-untyped-def]
    """(GFLOPs of one forward, sequence length, video tokens) for a clip of height x width under
    the preset, the prompt expanded as the processor expands it (timestamps included)."""
    values = PRESETS[preset]
    vision = with_frame_budget(
        QWEN3_VL_HUB_VIDEO, frames=values["frames"], frame_pixels=values["frame_pixels"]
    )
    size = target_size(values["frames"], height, width, vision)
    grid = grid_thw(values["frames"], *size, vision)
    ids = special_ids(tokenizer)
    holder = SimpleNamespace(
        vision=vision,
        tokenizer=tokenizer,
        video_token_id=ids["video"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
    )
    indices = np.linspace(0, 10 * FPS - 1, values["frames"]).round().astype(int)
    prompt = render_prompt(
        tokenizer, references=references, candidate=CANDIDATE, reference_free=not references
    )
    expanded = expand_prompt(prompt, video_placeholder(grid, indices, FPS, holder), holder)
    tokens = len(tokenizer(expanded, add_special_tokens=False)["input_ids"])
    t, h, w = grid
    flops = forward_flops(qwen3_vl_2b_config(), seq_len=tokens, patches=t * h * w, chunk=h * w)
    return flops["total"] / 1e9, tokens, t * h * w // 4


@pytest.mark.parametrize(("height", "width", "video_tokens"), [(240, 320, 6), (360, 640, 8)])
def test_paper_budget_costs_about_770_gflops_per_inference(tokenizer, height, width, video_tokens):
    gflops, tokens, video = inference_gflops(
        tokenizer, preset="paper-budget", height=height, width=width, references=[]
    )
    assert video == video_tokens
    assert gflops == pytest.approx(PAPER_GFLOPS_PER_INFERENCE, rel=0.05), (gflops, tokens)


def test_the_default_costs_five_times_more_and_the_prompt_dominates_the_budget(tokenizer):
    budget, _, _ = inference_gflops(
        tokenizer, preset="paper-budget", height=448, width=448, references=[]
    )
    default, _, video = inference_gflops(
        tokenizer, preset="default", height=448, width=448, references=[]
    )
    assert video == 784  # 8 frames of 448 px stay 448 px: 4 groups of 14 x 14
    assert default / budget > 5
    # Our reference-free prompt alone (no video) already takes most of 770 GFLOPs; the 1-ref
    # prompt is over it.
    text_only = {
        free: forward_flops(
            qwen3_vl_2b_config(),
            seq_len=len(
                tokenizer(
                    render_prompt(
                        tokenizer,
                        references=[] if free else [CANDIDATE],
                        candidate=CANDIDATE,
                        reference_free=free,
                    ),
                    add_special_tokens=False,
                )["input_ids"]
            ),
            patches=0,
            chunk=1,
        )["total"]
        / 1e9
        for free in (True, False)
    }
    assert 0.85 * PAPER_GFLOPS_PER_INFERENCE < text_only[True] < PAPER_GFLOPS_PER_INFERENCE
    assert text_only[False] > PAPER_GFLOPS_PER_INFERENCE


def test_a_paper_budget_run_feeds_the_backbone_one_small_temporal_group():
    config = RigelConfig(backbone="tiny", **PRESETS["paper-budget"])
    assert preset_name(config) == "paper-budget"
    assert preset_name(RigelConfig()) == "default"
    assert preset_name(RigelConfig(frames=4)) == "custom"
    backbone = load_backbone_for(config, Distributed())
    assert (backbone.vision.num_frames, backbone.vision.max_pixels) == (2, 2 * 9216)
    rng = np.random.default_rng(0)
    example = RigelExample(
        references=[],
        candidate=CANDIDATE,
        frames=rng.integers(0, 256, (2, 240, 320, 3), dtype=np.uint8),
    )
    batch = build_batch([example], backbone, reference_free=True)
    # 240 x 320 under 9,216 pixels a frame: 64 x 96 pixels, 4 x 6 patches of 16, one group
    assert batch["video_grid_thw"].tolist() == [[1, 4, 6]]
    # the default keeps the processor's own budget
    plain = load_backbone_for(RigelConfig(backbone="tiny"), Distributed())
    assert plain.vision.max_pixels == load_backbone("tiny").vision.max_pixels
    with pytest.raises(ValueError, match="frame_pixels"):
        RigelConfig(frame_pixels=-1)


def test_the_pixel_budget_is_part_of_the_teacher_cache_key():
    from training_bridge.rigel.teacher import prompt_version

    plain = prompt_version(reference_free=True, frames=2)
    budget = prompt_version(reference_free=True, frames=2, frame_pixels=9216)
    assert plain.endswith("-free-f2") and budget == plain + "-px9216"
