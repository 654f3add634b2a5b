"""Still images as Rigel's visual input: T = 1, through Qwen-VL's image path.

The paper defines the visual input as T frames of RGB images "with T = 1 for still images"
(Section 3, seed 000 line 36) and gives image prompts of their own (Appendix G, line 306). It does
not say through which door of the backbone's processor an image goes. We take the image path,
the one Qwen3-VL (and Qwen2.5-VL) use for a picture in a chat turn (``{"type": "image"}``):
``pixel_values`` / ``image_grid_thw`` and the ``<|image_pad|>`` placeholder, not a one-frame video.
*Ours*, for two reasons: the paper's image prompts are image prompts, and on this path the vision
tower sees exactly "T = 1": the image processor pads the one frame to ``temporal_patch_size``
with itself, the same patches as a one-frame video (``video.patchify`` pads the same way), so the
two paths differ only where the LLM reads them:

- the image carries no ``<t seconds>`` text (Qwen3-VL writes one per video group);
- the image pads are ``<|image_pad|>`` (``mm_token_type_ids`` 1, not 2);
- the image is resized to the *image* processor's budget (``image_min_pixels`` /
  ``image_max_pixels``, Qwen2-VL's ``smart_resize`` without a temporal factor).

``tests/rigel/test_images_processor_parity.py`` checks ids, grid, pixels and token types against
transformers' own image processor and ``Qwen3VLProcessor`` on the tiny backbone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .backbone import Backbone, VisionSettings
from .modality import VIDEO, check_modality
from .video import smart_resize_qwen2


def image_target_size(height: int, width: int, vision: VisionSettings) -> tuple[int, int]:
    """(height, width) the image processor resizes a still image to (Qwen2-VL's ``smart_resize``,
    which Qwen3-VL's image processor also uses, with the image budget)."""
    return smart_resize_qwen2(
        height,
        width,
        factor=vision.factor,
        min_pixels=vision.image_min_pixels,
        max_pixels=vision.image_max_pixels,
    )


def visual_target_size(
    modality: str, frames: int, height: int, width: int, vision: VisionSettings
) -> tuple[int, int]:
    """The processor's target size for a clip (video processor) or a still image (image
    processor; exactly one frame)."""
    from .video import target_size

    if check_modality(modality) == VIDEO:
        return target_size(frames, height, width, vision)
    if frames != 1:
        raise ValueError(f"a still image is one frame (T = 1), not {frames}")
    return image_target_size(height, width, vision)


def image_token_ids(grid: Sequence[int], backbone: Backbone) -> list[int]:
    """What replaces the prompt's ``<|image_pad|>``: ``t·h·w / merge²`` image pads, no timestamp
    (Qwen3VLProcessor.replace_image_token)."""
    t, h, w = (int(x) for x in grid)
    return [backbone.image_token_id] * (t * h * w // (backbone.vision.merge_size**2))


def vision_token_mask(ids: torch.Tensor, backbone: Backbone) -> torch.Tensor:
    """True where the visual features go: video pads and image pads."""
    return (ids == backbone.video_token_id) | (ids == backbone.image_token_id)
