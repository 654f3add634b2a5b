"""The VLM backbone of Rigel: Qwen3-VL (default) or Qwen2.5-VL, loaded offline from a local
directory or the Hugging Face cache, or built locally with random weights for tests and benchmarks.

Names understood by :func:`load_backbone`:

- ``"tiny"``: a tiny random Qwen3-VL (a few hundred thousand parameters) with a small locally
  built tokenizer; what the CPU tests use.
- ``"tiny-qwen2.5-vl"``: the same for the Qwen2.5-VL family.
- ``"qwen3-vl-2b-random"``: Qwen3-VL-2B-Instruct's exact dimensions (:func:`qwen3_vl_2b_config`)
  with random weights and a large locally built byte-level BPE tokenizer whose special tokens sit
  at Qwen's ids; what ``bench/gpu_rigel.py`` measures.
- anything else: a local directory or a Hub name already in the HF cache (``local_files_only``;
  nothing is downloaded).

No Django import here.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from training_bridge.rigel.local_backbones import (
    CHAT_TEMPLATE,
    build_tokenizer,
    qwen3_vl_2b_config,
    special_ids,
    tiny_qwen2_5_vl_config,
    tiny_qwen3_vl_config,
)
from training_bridge.rigel.prompts import DEFAULT_LAYOUT

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VisionSettings:
    """How frames become ``pixel_values_videos`` (mirrors the family's video processor)."""

    family: str = "qwen3_vl"  # or "qwen2_5_vl"
    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    # The processor's size dict: shortest_edge = min pixels, longest_edge = max pixels, both over
    # all frames of a clip (t * h * w), as transformers' Qwen3VLVideoProcessor.smart_resize uses them.
    min_pixels: int = 4096
    max_pixels: int = 25165824
    # transformers' `cap_pixels_per_frame` (qwen-vl-utils' per-frame cap); False = uncapped.
    cap_pixels_per_frame: bool = False
    max_video_tokens: int = 768
    num_frames: int = 8
    # Qwen3-VL writes "<t seconds>" before each temporal group; fps assumed when unknown.
    timestamps: bool = True
    default_fps: float = 24.0
    # The image processor's budget for a still image (preprocessor_config.json's size dict:
    # shortest_edge / longest_edge in pixels of the one image); these defaults are
    # Qwen3-VL-2B's preprocessor_config.json (65,536 and 16,777,216, with
    # Qwen2VLImageProcessorFast), read from the checkpoint when it has one. See `images.py`.
    image_min_pixels: int = 65536
    image_max_pixels: int = 16777216

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


def with_frame_budget(vision: VisionSettings, *, frames: int, frame_pixels: int) -> VisionSettings:
    """The vision settings for `frames` frames of at most `frame_pixels` pixels each (0: the
    settings unchanged, i.e. the checkpoint's own budget). The processor's ``smart_resize`` keeps
    t * h * w under max_pixels over all frames (t rounded up to the temporal patch), so the budget
    is per frame times that t, uncapped."""
    import dataclasses

    settings = dataclasses.replace(vision, num_frames=frames)
    if not frame_pixels:
        return settings
    temporal = vision.temporal_patch_size
    grouped = frames + (-frames % temporal)
    # A still image gets the budget of one frame (ours: the preset's per-frame resolution).
    return dataclasses.replace(
        settings,
        max_pixels=frame_pixels * grouped,
        min_pixels=min(vision.min_pixels, frame_pixels),
        cap_pixels_per_frame=False,
        image_max_pixels=frame_pixels,
        image_min_pixels=min(vision.image_min_pixels, frame_pixels),
    )


# Qwen3-VL-2B-Instruct's video_preprocessor_config.json: 448 px x 8 frames stay 448 px (784 tokens).
QWEN3_VL_HUB_VIDEO = VisionSettings()
# The issue's benchmark workload: transformers' class defaults for Qwen3VLVideoProcessor
# (shortest_edge 128*32*32, longest_edge 32*32*768) with the per-frame cap that transformers
# announces as its default: 8 frames of 448 px become 352 px, 4 x 11 x 11 = 484 video tokens.
QWEN3_VL_BENCH_VIDEO = VisionSettings(
    min_pixels=128 * 32 * 32, max_pixels=32 * 32 * 768, cap_pixels_per_frame=True
)
QWEN2_5_VL_VIDEO = VisionSettings(
    family="qwen2_5_vl",
    patch_size=14,
    image_mean=(0.48145466, 0.4578275, 0.40821073),
    image_std=(0.26862954, 0.26130258, 0.27577711),
    min_pixels=128 * 28 * 28,
    max_pixels=28 * 28 * 768,
    timestamps=False,
    default_fps=2.0,
    # Qwen2.5-VL-3B-Instruct's preprocessor_config.json (min_pixels 3,136, max_pixels 12,845,056).
    image_min_pixels=3136,
    image_max_pixels=12845056,
)


@dataclass
class Backbone:
    """A loaded VLM with everything the input side needs."""

    model: Any
    tokenizer: Any
    vision: VisionSettings
    name: str
    family: str
    device: torch.device
    dtype: torch.dtype
    score_token_ids: list[int]
    video_token_id: int
    vision_start_token_id: int
    vision_end_token_id: int
    image_token_id: int
    pad_token_id: int
    extra: dict[str, Any] = field(default_factory=dict)
    # the order of the prompt's parts this model is scored and trained with (prompts.py); a run
    # sets its own (`run_context.load_backbone_for`)
    prompt_layout: str = DEFAULT_LAYOUT

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.text_config.hidden_size)

    @property
    def language_model(self) -> Any:
        return self.model.model.language_model

    @property
    def visual(self) -> Any:
        return self.model.model.visual


def score_token_ids(tokenizer: Any) -> list[int]:
    """Ids of "1".."5", each of which must be a single token of this tokenizer."""
    ids: list[int] = []
    for digit in ("1", "2", "3", "4", "5"):
        encoded = tokenizer.encode(digit, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"the tokenizer splits {digit!r} into {encoded}; expected one token")
        ids.append(int(encoded[0]))
    return ids


# --------------------------------------------------------------------------------------------
# Building and loading


def _instantiate(
    config: Any, *, device: torch.device, dtype: torch.dtype, seed: int, attn: str
) -> Any:
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen3VLForConditionalGeneration

    cls = (
        Qwen2_5_VLForConditionalGeneration
        if config.model_type == "qwen2_5_vl"
        else Qwen3VLForConditionalGeneration
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(config, dtype=dtype, attn_implementation=attn)
    model.eval()
    return model


def _default_attn(device: torch.device) -> str:
    return "sdpa"


def load_backbone(
    path_or_name: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str | None = None,
    seed: int = 0,
    vision: VisionSettings | None = None,
    attn_implementation: str | None = None,
) -> Backbone:
    """Load or build a backbone (see the module docstring for the names); never downloads."""
    device = torch.device(device)
    resolved: torch.dtype
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype)
    elif dtype is None:
        resolved = torch.bfloat16 if device.type == "cuda" else torch.float32
    else:
        resolved = dtype
    dtype = resolved
    attn = attn_implementation or _default_attn(device)
    name = str(path_or_name)
    if name in ("tiny", "tiny-qwen3-vl"):
        tokenizer = build_tokenizer("tiny")
        model = _instantiate(
            tiny_qwen3_vl_config(tokenizer), device=device, dtype=dtype, seed=seed, attn=attn
        )
        settings = vision or QWEN3_VL_HUB_VIDEO
    elif name == "tiny-qwen2.5-vl":
        tokenizer = build_tokenizer("tiny")
        model = _instantiate(
            tiny_qwen2_5_vl_config(tokenizer), device=device, dtype=dtype, seed=seed, attn=attn
        )
        settings = vision or QWEN2_5_VL_VIDEO
    elif name == "qwen3-vl-2b-random":
        tokenizer = build_tokenizer("large")
        model = _instantiate(qwen3_vl_2b_config(), device=device, dtype=dtype, seed=seed, attn=attn)
        settings = vision or QWEN3_VL_BENCH_VIDEO
    else:
        model, tokenizer, settings = _load_pretrained(name, device=device, dtype=dtype, attn=attn)
        settings = vision or settings
    return _make_backbone(model, tokenizer, settings, name=name, device=device, dtype=dtype)


def _make_backbone(
    model: Any,
    tokenizer: Any,
    settings: VisionSettings,
    *,
    name: str,
    device: torch.device,
    dtype: torch.dtype,
) -> Backbone:
    ids = special_ids(tokenizer)
    config = model.config
    if int(config.video_token_id) != ids["video"]:
        raise ValueError("the model's video_token_id does not match the tokenizer's <|video_pad|>")
    tokenizer.padding_side = "left"
    return Backbone(
        model=model,
        tokenizer=tokenizer,
        vision=settings,
        name=name,
        family=settings.family,
        device=device,
        dtype=dtype,
        score_token_ids=score_token_ids(tokenizer),
        video_token_id=ids["video"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
        image_token_id=ids["image"],
        pad_token_id=ids["pad"],
    )


def _load_pretrained(
    name: str, *, device: torch.device, dtype: torch.dtype, attn: str
) -> tuple[Any, Any, VisionSettings]:
    from transformers import (
        AutoConfig,
        AutoTokenizer,
        Qwen2_5_VLForConditionalGeneration,
        Qwen3VLForConditionalGeneration,
    )

    config = AutoConfig.from_pretrained(name, local_files_only=True)
    cls: Any  # one of the two families' classes, chosen by the checkpoint's config
    if config.model_type == "qwen3_vl":
        cls = Qwen3VLForConditionalGeneration
        settings = QWEN3_VL_HUB_VIDEO
    elif config.model_type == "qwen2_5_vl":
        cls = Qwen2_5_VLForConditionalGeneration
        settings = QWEN2_5_VL_VIDEO
    else:
        raise ValueError(
            f"unsupported backbone family {config.model_type!r} (Qwen3-VL or Qwen2.5-VL)"
        )
    model = cls.from_pretrained(
        name, local_files_only=True, dtype=dtype, attn_implementation=attn, device_map=None
    ).to(device)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
    directory = _resolve_dir(name)
    if directory is not None:
        if getattr(tokenizer, "chat_template", None) is None:
            tokenizer.chat_template = _read_chat_template(directory)
        settings = _read_video_settings(directory, settings)
        settings = _read_image_budget(directory, settings)
    if getattr(tokenizer, "chat_template", None) is None:
        tokenizer.chat_template = CHAT_TEMPLATE
    return model, tokenizer, settings


def _resolve_dir(name: str) -> Path | None:
    path = Path(name)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # not in the cache as a snapshot
        return None


def _read_chat_template(directory: Path) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.exists():
        return jinja.read_text(encoding="utf-8")
    js = directory / "chat_template.json"
    if js.exists():
        return json.loads(js.read_text(encoding="utf-8")).get("chat_template")
    return None


def _read_image_budget(directory: Path, base: VisionSettings) -> VisionSettings:
    """The image processor's pixel budget (preprocessor_config.json), for still images."""
    import dataclasses

    path = directory / "preprocessor_config.json"
    if not path.exists():
        return base
    data = json.loads(path.read_text(encoding="utf-8"))
    size = data.get("size") or {}
    low = size.get("shortest_edge", data.get("min_pixels"))
    high = size.get("longest_edge", data.get("max_pixels"))
    changes: dict[str, Any] = {}
    if low is not None:
        changes["image_min_pixels"] = int(low)
    if high is not None:
        changes["image_max_pixels"] = int(high)
    return dataclasses.replace(base, **changes)


def _read_video_settings(directory: Path, base: VisionSettings) -> VisionSettings:
    import dataclasses

    for filename in ("video_preprocessor_config.json", "preprocessor_config.json"):
        path = directory / filename
        if not path.exists():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        size = data.get("size") or {}
        changes: dict[str, Any] = {}
        for key in ("patch_size", "temporal_patch_size", "merge_size", "max_video_tokens"):
            if key in data:
                changes[key] = int(data[key])
        if "image_mean" in data:
            changes["image_mean"] = tuple(float(x) for x in data["image_mean"])
        if "image_std" in data:
            changes["image_std"] = tuple(float(x) for x in data["image_std"])
        if "shortest_edge" in size:
            changes["min_pixels"] = int(size["shortest_edge"])
        elif "min_pixels" in data:
            changes["min_pixels"] = int(data["min_pixels"])
        if "longest_edge" in size:
            changes["max_pixels"] = int(size["longest_edge"])
        elif "max_pixels" in data:
            changes["max_pixels"] = int(data["max_pixels"])
        if data.get("cap_pixels_per_frame") is not None:
            changes["cap_pixels_per_frame"] = bool(data["cap_pixels_per_frame"])
        return dataclasses.replace(base, **changes)
    return base
