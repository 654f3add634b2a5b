"""From (video, references, candidate) to the keyword arguments of the backbone's forward.

:func:`build_batch` returns exactly what ``Qwen3VLForConditionalGeneration.forward`` needs for a
video prompt — ``input_ids``, ``attention_mask``, ``mm_token_type_ids``, ``pixel_values_videos``,
``video_grid_thw`` (plus ``second_per_grid_ts`` for Qwen2.5-VL) — left-padded, so that position
``-1`` of every row is the answer position (the next token is the score digit).

The token sequence is the one transformers' processor builds (checked against it, see
``tests/rigel/test_inputs_processor_parity.py``): the chat template puts
``<|vision_start|><|video_pad|><|vision_end|>`` where the video goes, and Qwen3-VL's processor
replaces the ``<|video_pad|>`` with, per temporal group, ``<{t:.1f} seconds>`` followed by
``<|vision_start|>``, ``h·w / merge²`` video pads and ``<|vision_end|>``.

A still image (``RigelExample(modality="image")``, one frame: T = 1) goes through Qwen-VL's image
path instead (``pixel_values`` / ``image_grid_thw``, ``<|image_pad|>``; see ``images.py``); a batch
may mix images and videos.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import prompts
from .backbone import Backbone, VisionSettings
from .images import image_token_ids, visual_target_size
from .modality import IMAGE, VIDEO, check_modality
from .video import (
    DecodedVideo,
    decode_video,
    frames_to_tensor,
    grid_thw,
    load_frames,
    preprocess_clips,
    timestamps,
)


@dataclass
class RigelExample:
    """One sample: a video (decoded frames, a frames directory/list, or a video file), the human
    references and the candidate caption. ``fps``/``frame_indices`` describe pre-decoded frames
    (where in the source they were taken; Qwen3-VL writes their timestamps into the prompt)."""

    references: list[str]
    candidate: str
    frames: np.ndarray | None = None  # (T, H, W, 3) uint8 RGB
    frame_paths: str | Path | list[str | Path] | None = None  # a directory or a list of images
    video_path: str | Path | None = None
    fps: float | None = None
    frame_indices: list[int] | None = None
    # Instants (seconds) of pre-sampled frames, e.g. common.media.frame_times(duration, count)
    # for the ingest pipeline's clips/<id>/frames/*.jpg; used instead of fps/frame_indices.
    frame_times: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # "video", or "image": a still image, exactly one frame (T = 1), through the image path.
    modality: str = VIDEO
    # This sample's prompt setting; None: the engine's (or the model's). Set, one engine scores
    # several protocols of a clip in one pass (decoded and through the vision tower once).
    reference_free: bool | None = None


def sample_reference_free(example: RigelExample, default: bool) -> bool:
    """The prompt setting of this sample: its own when it has one, else ``default``."""
    return default if example.reference_free is None else bool(example.reference_free)


TIME_FPS = 1000.0  # frame_times become indices in milliseconds at this rate


def load_video(example: RigelExample, vision: VisionSettings) -> DecodedVideo:
    """The example's frames, decoded or loaded, with their source indices and fps."""
    if example.frame_times is not None:
        indices = [int(round(t * TIME_FPS)) for t in example.frame_times]
        example = RigelExample(
            references=example.references,
            candidate=example.candidate,
            frames=example.frames,
            frame_paths=example.frame_paths,
            video_path=example.video_path,
            fps=TIME_FPS,
            frame_indices=indices,
        )
        if (
            example.video_path is not None
            and example.frames is None
            and example.frame_paths is None
        ):
            raise ValueError("frame_times describe pre-sampled frames, not a video file")
    if example.frames is not None:
        frames = np.asarray(example.frames)
        given = np.asarray(
            example.frame_indices if example.frame_indices is not None else range(len(frames))
        )
        return DecodedVideo(
            frames=frames,
            indices=given,
            fps=float(example.fps or vision.default_fps),
            total_frames=int(given.max()) + 1,
        )
    if example.frame_paths is not None:
        return load_frames(
            example.frame_paths,
            fps=example.fps,
            indices=example.frame_indices,
            default_fps=vision.default_fps,
        )
    if example.video_path is not None:
        return decode_video(example.video_path, vision.num_frames)
    raise ValueError("the example has no frames, frame_paths or video_path")


def mm_token_type_ids(input_ids: Sequence[int] | np.ndarray, backbone: Backbone) -> np.ndarray:
    """0 text, 1 image pad, 2 video pad (what the processor returns)."""
    ids = np.asarray(input_ids)
    types = np.zeros_like(ids)
    types[ids == backbone.image_token_id] = 1
    types[ids == backbone.video_token_id] = 2
    return types


@dataclass
class EncodedExample:
    input_ids: list[int]
    grid: tuple[int, int, int]
    fps: float
    pixel_values: torch.Tensor | None = None  # (N, C·tp·p·p) float32
    frames: np.ndarray | None = None  # raw uint8 frames when preprocessing is deferred
    modality: str = VIDEO


def encode_text(
    example: RigelExample,
    video: DecodedVideo,
    backbone: Backbone,
    *,
    reference_free: bool,
) -> tuple[list[int], tuple[int, int, int]]:
    """Token ids of the full prompt for a clip of this shape (no pixel work)."""
    vision = backbone.vision
    frames = video.frames
    modality = check_modality(example.modality)
    size = visual_target_size(
        modality, len(frames), int(frames.shape[1]), int(frames.shape[2]), vision
    )
    grid = grid_thw(len(frames), size[0], size[1], vision)
    prompt = prompts.render_prompt(
        backbone.tokenizer,
        references=example.references,
        candidate=example.candidate,
        reference_free=reference_free,
        modality=modality,
        layout=backbone.prompt_layout,
    )
    ids = tokenize_expanded(prompt, grid, video.indices, video.fps, backbone, modality=modality)
    return list(ids), grid


def tokenize_expanded(
    prompt: str,
    grid: Sequence[int],
    indices: Sequence[int] | np.ndarray,
    fps: float,
    backbone: Backbone,
    *,
    modality: str = VIDEO,
) -> list[int]:
    """Ids of the prompt with the processor's expansion of its video pad (the text expansion is the
    tests' oracle, tests/rigel/oracles.py) without tokenising the hundreds of
    video pads as text: special tokens split the text into segments that are tokenised
    independently, so the ids are the prefix's, then per group the timestamp's, the start token,
    the pads and the end token, then the suffix's (tests compare with the plain tokenisation).
    An image (``modality="image"``): the prefix's, the image pads, the suffix's."""
    tokenizer = backbone.tokenizer
    vision = backbone.vision
    image = check_modality(modality) == IMAGE
    pad = tokenizer.convert_ids_to_tokens(
        backbone.image_token_id if image else backbone.video_token_id
    )
    if prompt.count(pad) != 1:
        raise ValueError(f"the prompt must hold exactly one {pad}")
    prefix, suffix = prompt.split(pad)
    t, h, w = (int(x) for x in grid)
    per_group = h * w // (vision.merge_size**2)

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    ids = encode(prefix)
    if image:
        ids.extend(image_token_ids(grid, backbone))
    elif not vision.timestamps:
        ids.extend([backbone.video_token_id] * (t * per_group))
    else:
        times = timestamps(indices, fps, vision.temporal_patch_size)
        for k in range(t):
            ids.extend(encode(f"<{times[k]:.1f} seconds>"))
            ids.append(backbone.vision_start_token_id)
            ids.extend([backbone.video_token_id] * per_group)
            ids.append(backbone.vision_end_token_id)
    ids.extend(encode(suffix))
    return ids


def encode_example(
    example: RigelExample,
    backbone: Backbone,
    *,
    reference_free: bool,
    device: str | torch.device = "cpu",
    video: DecodedVideo | None = None,
) -> EncodedExample:
    video = video if video is not None else load_video(example, backbone.vision)
    ids, grid = encode_text(example, video, backbone, reference_free=reference_free)
    frames = video.frames
    size = visual_target_size(
        example.modality, len(frames), int(frames.shape[1]), int(frames.shape[2]), backbone.vision
    )
    clip = frames_to_tensor(frames).to(device).unsqueeze(0)
    values, got = preprocess_clips(clip, backbone.vision, size=size)
    if got != grid:
        raise AssertionError(f"grid {got} != {grid}")
    return EncodedExample(
        input_ids=ids, grid=grid, fps=video.fps, pixel_values=values[0], modality=example.modality
    )


def left_pad(
    sequences: Sequence[Sequence[int]], pad_value: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) left-padded ids and the attention mask."""
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_value, dtype=torch.long)
    mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if len(seq):
            ids[row, length - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, length - len(seq) :] = 1
    return ids, mask


def collate(
    encoded: Sequence[EncodedExample], backbone: Backbone, *, device: str | torch.device = "cpu"
) -> dict[str, torch.Tensor]:
    ids, mask = left_pad([e.input_ids for e in encoded], backbone.pad_token_id)
    types = torch.as_tensor(mm_token_type_ids(ids.numpy(), backbone), dtype=torch.long)
    types[mask == 0] = 0
    batch: dict[str, torch.Tensor] = {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "mm_token_type_ids": types.to(device),
    }
    # Images and videos each in row order (the model scatters them in order into their pads).
    videos = [e for e in encoded if e.modality == VIDEO]
    images = [e for e in encoded if e.modality == IMAGE]
    for rows, values_key, grid_key in (
        (videos, "pixel_values_videos", "video_grid_thw"),
        (images, "pixel_values", "image_grid_thw"),
    ):
        if rows:
            batch[values_key] = torch.cat([e.pixel_values for e in rows], dim=0).to(device)  # type: ignore[misc]
            batch[grid_key] = torch.tensor(
                [list(e.grid) for e in rows], dtype=torch.long, device=device
            )
    if backbone.family == "qwen2_5_vl" and videos:
        tp = backbone.vision.temporal_patch_size
        batch["second_per_grid_ts"] = torch.tensor(
            [tp / e.fps for e in videos], dtype=torch.float32, device=device
        )
    return batch


def build_batch(
    examples: Sequence[RigelExample],
    backbone: Backbone,
    *,
    reference_free: bool,
    device: str | torch.device = "cpu",
) -> dict[str, torch.Tensor]:
    """The forward kwargs for a batch of examples, left-padded (position -1 = answer position)."""
    if not examples:
        raise ValueError("no examples")
    encoded = [
        encode_example(example, backbone, reference_free=reference_free, device=device)
        for example in examples
    ]
    return collate(encoded, backbone, device=device)


def rope_position_ids(
    mm_types: Sequence[int] | np.ndarray, grid: Sequence[int], merge_size: int
) -> np.ndarray:
    """Qwen3-VL's 3-D M-RoPE positions (3, L) of one unpadded sequence with one video, the same
    numbers ``Qwen3VLModel.get_rope_index`` computes (each run of video pads is one temporal
    group of ``h/merge x w/merge`` tokens)."""
    types = np.asarray(mm_types)
    _, h, w = (int(x) for x in grid)
    lh, lw = h // merge_size, w // merge_size
    pieces: list[np.ndarray] = []
    current = 0
    start = 0
    for key, run in itertools.groupby(types.tolist()):
        length = len(list(run))
        if key == 0:
            pieces.append(np.broadcast_to(np.arange(length) + current, (3, length)))
            current += length
        else:
            if length != lh * lw:
                raise ValueError(f"a video run of {length} tokens, expected {lh * lw}")
            hh, ww = np.meshgrid(np.arange(lh), np.arange(lw), indexing="ij")
            block = np.stack(
                [np.full(lh * lw, current), hh.reshape(-1) + current, ww.reshape(-1) + current]
            )
            pieces.append(block)
            current += max(h, w) // merge_size
        start += length
    return np.concatenate(pieces, axis=1).astype(np.int64)
