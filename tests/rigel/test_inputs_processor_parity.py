"""Our preprocessing against transformers' official Qwen3-VL processor.

The official ``Qwen3VLVideoProcessor`` needs torchvision, which cannot be installed beside this
project's torch. Two checks therefore:

- ``test_matches_committed_official_outputs``: runs everywhere (CI included). The fixture
  ``fixtures/qwen3vl_processor_fixtures.npz`` holds inputs and the official processor's outputs
  (transformers 5.24.0 with torchvision, produced by ``bench/gpu/processor_parity.py``);
  ``pixel_values_videos``, ``video_grid_thw``, ``input_ids`` and ``mm_token_type_ids`` must be equal.
- ``test_matches_live_official_processor``: calls the official processor itself; skipped when
  torchvision is not importable (as on the development machine).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from training_bridge.rigel import prompts
from training_bridge.rigel.backbone import VisionSettings, load_backbone
from training_bridge.rigel.inputs import RigelExample, encode_example

FIXTURES = Path(__file__).parent / "fixtures" / "qwen3vl_processor_fixtures.npz"


def _cases() -> dict[str, dict[str, np.ndarray]]:
    data = np.load(FIXTURES)
    cases: dict[str, dict[str, np.ndarray]] = {}
    for key in data.files:
        name, field = key.split("__")
        cases.setdefault(name, {})[field] = data[key]
    return cases


def _ours(case: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    meta = json.loads(str(case["meta"]))
    vision = VisionSettings(**meta["vision"])
    backbone = load_backbone("tiny", device="cpu", vision=vision)
    # the committed fixtures were rendered with the order of the runs trained before layouts
    backbone.prompt_layout = prompts.LEGACY_LAYOUT
    example = RigelExample(
        references=meta["references"],
        candidate=meta["candidate"],
        frames=case["frames"],
        fps=meta["fps"],
        frame_indices=meta["indices"],
    )
    prompt = prompts.render_prompt(
        backbone.tokenizer,
        references=meta["references"],
        candidate=meta["candidate"],
        reference_free=False,
        layout=prompts.LEGACY_LAYOUT,
    )
    assert prompt == meta["prompt"]
    return backbone, encode_example(example, backbone, reference_free=False)


@pytest.mark.skipif(not FIXTURES.exists(), reason="fixture not generated yet")
def test_matches_committed_official_outputs() -> None:
    cases = _cases()
    assert set(cases) == {"small_hub", "downscale", "capped"}
    for case in cases.values():
        backbone, ours = _ours(case)
        assert [list(ours.grid)] == case["video_grid_thw"].tolist()
        assert torch.equal(ours.pixel_values, torch.from_numpy(case["pixel_values_videos"]))
        assert ours.input_ids == case["input_ids"][0].tolist()
        types = [2 if i == backbone.video_token_id else 0 for i in ours.input_ids]
        assert types == case["mm_token_type_ids"][0].tolist()


@pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is None,
    reason="the official Qwen3VLVideoProcessor needs torchvision (not installable beside torch 2.13)",
)
def test_matches_live_official_processor() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))
    import processor_parity  # type: ignore[import-not-found]

    rng = np.random.default_rng(5)
    for _name, shape, indices, fps, vision, refs, cand, _fixture in processor_parity.CASES[:3]:
        backbone = load_backbone("tiny", device="cpu", vision=vision)
        frames = processor_parity.smooth_frames(rng, *shape)
        prompt = prompts.render_prompt(
            backbone.tokenizer, references=refs, candidate=cand, reference_free=False
        )
        processor = processor_parity.official_processor(backbone.tokenizer, vision)
        official = processor_parity.run_official(processor, prompt, frames, indices, fps, vision)
        example = RigelExample(refs, cand, frames=frames, fps=fps, frame_indices=indices)
        ours = encode_example(example, backbone, reference_free=False)
        assert torch.equal(official["pixel_values_videos"], ours.pixel_values)
        assert official["video_grid_thw"].tolist() == [list(ours.grid)]
        assert official["input_ids"][0].tolist() == ours.input_ids
