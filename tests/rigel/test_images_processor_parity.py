"""Still images (T = 1) through Qwen-VL's image path, against transformers' own processor.

Unlike the video processor (which needs torchvision, see test_inputs_processor_parity.py), the
image side runs here: transformers' PIL image processor (``Qwen2VLImageProcessorPil``, the image
processor Qwen3-VL uses) and ``Qwen3VLProcessor`` itself, on the tiny backbone's tokenizer. The
checks: the grid, the token ids (``<|image_pad|>`` expanded, no timestamp), ``mm_token_type_ids``
and the pixel values (equal to float rounding where no resize happens; within one uint8 level
where PIL's bicubic and torch's antialiased bicubic both resize), then a batch that mixes an image and a video gives
each row the logits it gets alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from training_bridge.rigel import prompts
from training_bridge.rigel.backbone import CHAT_TEMPLATE, load_backbone
from training_bridge.rigel.images import image_target_size
from training_bridge.rigel.inputs import (
    RigelExample,
    build_batch,
    encode_example,
    rope_position_ids,
)

REFERENCES = ["a dog runs on the grass .", "a brown dog is playing outside ."]
CANDIDATE = "a dog running in a park"


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    backbone = load_backbone("tiny", device="cpu", seed=0)
    # a small image budget, so that the cases below exercise both bounds of smart_resize
    backbone.vision = dataclasses.replace(
        backbone.vision, image_min_pixels=32 * 32 * 4, image_max_pixels=32 * 32 * 12
    )
    return backbone


def _official(backbone):  # type: ignore[no-untyped-def]
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    vision = backbone.vision
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=vision.patch_size,
        temporal_patch_size=vision.temporal_patch_size,
        merge_size=vision.merge_size,
        image_mean=list(vision.image_mean),
        image_std=list(vision.image_std),
        size={"shortest_edge": vision.image_min_pixels, "longest_edge": vision.image_max_pixels},
    )
    processor = Qwen3VLProcessor.__new__(Qwen3VLProcessor)
    # The processor's own __init__ insists on a video processor (torchvision); its image half
    # needs only these attributes.
    processor.image_processor = image_processor
    processor.tokenizer = backbone.tokenizer
    processor.chat_template = CHAT_TEMPLATE
    processor.image_token = "<|image_pad|>"
    processor.image_token_id = backbone.image_token_id
    return image_processor, processor


def _smooth(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = [127 + 90 * np.sin(xs / (5 + c) + ys / (7 + 2 * c) + c) for c in range(3)]
    image = np.stack(channels, axis=-1) + rng.normal(0, 6, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


@pytest.mark.parametrize(
    ("height", "width", "resized"),
    [
        (64, 96, False),  # multiples of 32 inside the budget: no resize
        (50, 75, True),  # rounded to 64 x 64
        (300, 170, True),  # over the budget: scaled down
        (20, 30, True),  # under the budget: scaled up
    ],
)
def test_image_matches_transformers_processor(tiny, height: int, width: int, resized: bool) -> None:  # type: ignore[no-untyped-def]
    image = _smooth(height, width, seed=height)
    image_processor, processor = _official(tiny)
    official_pixels = image_processor(images=[image], return_tensors="pt")
    prompt = prompts.render_prompt(
        tiny.tokenizer,
        references=REFERENCES,
        candidate=CANDIDATE,
        reference_free=False,
        modality="image",
    )
    assert prompt.count("<|image_pad|>") == 1 and "<|video_pad|>" not in prompt
    official = processor.__class__.__call__(processor, images=[image], text=[prompt])
    example = RigelExample(
        references=REFERENCES, candidate=CANDIDATE, frames=image[None], modality="image"
    )
    ours = encode_example(example, tiny, reference_free=False)

    assert [list(ours.grid)] == official_pixels["image_grid_thw"].tolist()
    expected_size = image_target_size(height, width, tiny.vision)
    assert ours.grid == (1, expected_size[0] // 16, expected_size[1] // 16)
    assert ours.input_ids == list(official["input_ids"][0])
    types = [1 if i == tiny.image_token_id else 0 for i in ours.input_ids]
    assert types == list(official["mm_token_type_ids"][0])
    assert "seconds>" not in tiny.tokenizer.decode(ours.input_ids)
    reference = official_pixels["pixel_values"]
    assert ours.pixel_values is not None and ours.pixel_values.shape == reference.shape
    if not resized:
        # the same uint8 pixels; float rounding only: the PIL processor rescales and normalises
        # in two steps, the fast (torchvision) processor fuses them as we do (video parity test)
        assert torch.allclose(ours.pixel_values, reference, rtol=0, atol=1e-6)
    else:  # PIL's and torch's bicubic round differently: at most one uint8 level apart
        one_level = 1.0 / 255 / 0.5 + 1e-6
        assert (ours.pixel_values - reference).abs().max().item() <= one_level
    # T = 1: the one frame padded with itself to the temporal patch, as in a one-frame video
    patch = ours.pixel_values.view(ours.pixel_values.shape[0], 3, 2, 16, 16)
    assert torch.equal(patch[:, :, 0], patch[:, :, 1])


def test_mixed_batch_gives_each_row_its_own_logits(tiny) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(3)
    video = RigelExample(
        references=REFERENCES,
        candidate=CANDIDATE,
        frames=rng.integers(0, 256, (4, 64, 64, 3), dtype=np.uint8),
    )
    image = RigelExample(
        references=REFERENCES,
        candidate="a cat on a sofa",
        frames=_smooth(64, 96, seed=1)[None],
        modality="image",
    )
    batch = build_batch([image, video, image], tiny, reference_free=False)
    assert {"pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"} <= set(batch)
    assert batch["image_grid_thw"].tolist() == [[1, 4, 6], [1, 4, 6]]
    with torch.no_grad():
        mixed = tiny.model(**batch).logits[:, -1, tiny.score_token_ids]
        alone = [
            tiny.model(**build_batch([e], tiny, reference_free=False)).logits[
                :, -1, tiny.score_token_ids
            ][0]
            for e in (image, video)
        ]
    assert torch.allclose(mixed[0], alone[0], atol=1e-4)
    assert torch.allclose(mixed[1], alone[1], atol=1e-4)
    assert torch.allclose(mixed[2], alone[0], atol=1e-4)
    # the engine's M-RoPE positions for the image row equal the model's
    expected, _ = tiny.model.model.get_rope_index(
        batch["input_ids"],
        batch["mm_token_type_ids"],
        image_grid_thw=batch["image_grid_thw"],
        video_grid_thw=batch["video_grid_thw"],
        attention_mask=batch["attention_mask"],
    )
    keep = batch["attention_mask"][0].bool()
    ours = rope_position_ids(batch["mm_token_type_ids"][0][keep].numpy(), [1, 4, 6], 2)
    assert np.array_equal(expected[:, 0][:, keep].numpy(), ours)


def test_image_prompt_names_the_image(tiny) -> None:  # type: ignore[no-untyped-def]
    text = prompts.prompt_text(
        references=REFERENCES, candidate=CANDIDATE, reference_free=True, modality="image"
    )
    assert "video" not in text and "image shown above" in text
    video_text = prompts.prompt_text(
        references=REFERENCES, candidate=CANDIDATE, reference_free=True
    )
    assert video_text.replace("video", "image") == text
    with pytest.raises(ValueError):
        prompts.prompt_text(references=[], candidate="x", reference_free=True, modality="audio")
    with pytest.raises(ValueError, match="one frame"):
        encode_example(
            RigelExample(
                references=[],
                candidate="x",
                frames=_smooth(32, 32, 0)[None].repeat(2, 0),
                modality="image",
            ),
            tiny,
            reference_free=True,
        )


def test_qwen2_5_vl_takes_images_beside_videos() -> None:
    """Qwen2.5-VL (Table 3 (iv)'s backbone): images through its image path too, with the video
    rows' second_per_grid_ts only; each row of a mixed batch gets the logits it gets alone."""
    backbone = load_backbone("tiny-qwen2.5-vl", device="cpu", seed=0)
    rng = np.random.default_rng(9)
    image = RigelExample(
        references=REFERENCES, candidate=CANDIDATE, frames=_smooth(56, 84, 2)[None],
        modality="image",
    )  # fmt: skip
    video = RigelExample(
        references=REFERENCES,
        candidate="a dog",
        frames=rng.integers(0, 256, (4, 56, 56, 3), dtype=np.uint8),
        fps=2.0,
    )
    batch = build_batch([video, image], backbone, reference_free=False)
    assert batch["image_grid_thw"].tolist() == [[1, 4, 6]]
    assert batch["second_per_grid_ts"].shape == (1,)
    with torch.no_grad():
        mixed = backbone.model(**batch).logits[:, -1, backbone.score_token_ids]
        for row, example in enumerate((video, image)):
            alone = backbone.model(**build_batch([example], backbone, reference_free=False))
            assert torch.allclose(
                mixed[row], alone.logits[0, -1, backbone.score_token_ids], atol=1e-4
            )
