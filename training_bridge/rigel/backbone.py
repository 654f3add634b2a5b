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

import functools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

# Qwen's special tokens, in the order (and for the large tokenizer at the ids) Qwen2/Qwen3 use.
QWEN_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",  # 151643
    "<|im_start|>",  # 151644
    "<|im_end|>",  # 151645
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",  # 151652
    "<|vision_end|>",  # 151653
    "<|vision_pad|>",  # 151654
    "<|image_pad|>",  # 151655
    "<|video_pad|>",  # 151656
)
QWEN_FIRST_SPECIAL_ID = 151643

# Qwen2's pre-tokenizer split (digits one by one, so "1".."5" are single tokens).
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# A Qwen-style chat template (the real checkpoints bring their own).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'video' -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- else -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)


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

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.text_config.hidden_size)

    @property
    def language_model(self) -> Any:
        return self.model.model.language_model

    @property
    def visual(self) -> Any:
        return self.model.model.visual


# --------------------------------------------------------------------------------------------
# Tokenizers built locally with the `tokenizers` library


CAPTION_CORPUS = (
    Path(__file__).resolve().parents[2] / "data" / "vatex_eval" / "vid_cans_score_dict.json"
)


def _caption_corpus() -> list[str]:
    """Captions shipped with the repository (VATEX-EVAL), for training BPE merges. Refused when
    the file is missing: a tokenizer trained on the prompts alone splits a caption into about
    2.5 times as many tokens, and every figure measured with it would be off (issue 29)."""
    path = CAPTION_CORPUS
    if not path.exists():
        raise FileNotFoundError(
            f"the caption corpus the local tokenizer is trained on is missing: {path} (it ships "
            "with the repository; copy data/vatex_eval/ with the code)"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    texts: list[str] = []
    for row in data.values():
        for key in ("cands", "refs", "references"):
            value = row.get(key) if isinstance(row, dict) else None
            if isinstance(value, list):
                texts.extend(str(v) for v in value)
    return texts


@functools.lru_cache(maxsize=4)
def _tokenizer_json(kind: str) -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from . import prompts

    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    corpus = prompts.prompt_corpus() * 20
    if kind == "tiny":
        vocab_size = 768
        corpus += _caption_corpus()[:2000]
    elif kind == "large":
        vocab_size = 32000
        corpus += _caption_corpus()
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}")
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        special_tokens=[],
    )
    trainer_tok.train_from_iterator(corpus, trainer=trainer)
    state = json.loads(trainer_tok.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    # Each merge is a pair, stored as "a b" or ["a", "b"] depending on the tokenizers version.
    merges: list[tuple[str, str]] = [
        (pair[0], pair[1])
        for pair in (m.split(" ") if isinstance(m, str) else m for m in state["model"]["merges"])
    ]
    if kind == "large":
        # Unreachable filler entries so that the special tokens land at Qwen's ids.
        next_id = len(vocab)
        while next_id < QWEN_FIRST_SPECIAL_ID:
            vocab[f"<|reserved_{next_id}|>"] = next_id
            next_id += 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(QWEN_SPECIAL_TOKENS))
    return tok.to_str()


def build_tokenizer(kind: str = "tiny") -> Any:
    """A Qwen-like PreTrainedTokenizerFast built locally (no download).

    ``tiny``: byte-level BPE with 768 entries trained on our prompts and a few captions, then the
    special tokens. ``large``: 32k merges trained on the shipped VATEX-EVAL captions, padded with
    unreachable entries so that the special tokens take Qwen's ids (151643...).
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(_tokenizer_json(kind))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[
            t for t in QWEN_SPECIAL_TOKENS if t not in ("<|endoftext|>", "<|im_end|>")
        ],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


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
# Configurations


def _text_rope(theta: float, section: list[int]) -> dict[str, Any]:
    return {
        "rope_type": "default",
        "rope_theta": theta,
        "mrope_section": section,
        "mrope_interleaved": True,
    }


def qwen3_vl_2b_config() -> Any:
    """Qwen3-VL-2B-Instruct's config.json, written out (random weights are built from it).

    Text: hidden 2048, 28 layers, 16 query / 8 key-value heads of 128, MLP 6144, vocab 151936,
    RMSNorm eps 1e-6, M-RoPE theta 5e6 with interleaved sections [24, 20, 20], tied embeddings,
    max positions 262144. Vision: 24 blocks of hidden 1024, 16 heads, MLP 4096, gelu_pytorch_tanh,
    patch 16, temporal patch 2, merge 2, 2304 position embeddings, DeepStack after blocks 5, 11,
    17, output 2048. Token ids: image 151655, video 151656, vision start/end 151652/151653.

    Source: the checkpoint's config.json (huggingface.co/Qwen/Qwen3-VL-2B-Instruct, file
    config.json); transformers' own `Qwen3VLConfig()` defaults are the 4B's
    (configuration_qwen3_vl.py documents checkpoint Qwen/Qwen3-VL-4B-Instruct: text hidden 2560,
    36 layers), so they cannot stand in. A public printout of a 2B Qwen3-VL config with these text
    and vision sizes: github.com/xorbitsai/inference issue #4592 (Qwen3-VL-Embedding-2B).
    `tests/rigel/test_paper_defaults.py` checks the paper's 1.61M LoRA parameters on it.
    """
    from transformers import Qwen3VLConfig

    return Qwen3VLConfig(
        text_config={
            "vocab_size": 151936,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_act": "silu",
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "initializer_range": 0.02,
            "tie_word_embeddings": True,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
            "rope_parameters": _text_rope(5000000.0, [24, 20, 20]),
        },
        vision_config={
            "depth": 24,
            "hidden_size": 1024,
            "hidden_act": "gelu_pytorch_tanh",
            "intermediate_size": 4096,
            "num_heads": 16,
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 2048,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [5, 11, 17],
            "initializer_range": 0.02,
        },
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        tie_word_embeddings=True,
    )


def tiny_qwen3_vl_config(tokenizer: Any) -> Any:
    from transformers import Qwen3VLConfig

    ids = _special_ids(tokenizer)
    return Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "pad_token_id": ids["pad"],
            "rope_parameters": _text_rope(5000000.0, [6, 5, 5]),
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 64,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        },
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
        tie_word_embeddings=True,
    )


def tiny_qwen2_5_vl_config(tokenizer: Any) -> Any:
    from transformers import Qwen2_5_VLConfig

    ids = _special_ids(tokenizer)
    return Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "pad_token_id": ids["pad"],
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [4, 6, 6],
            },
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 64,
            "window_size": 112,
            "fullatt_block_indexes": [1],
        },
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
        tie_word_embeddings=True,
    )


def _special_ids(tokenizer: Any) -> dict[str, int]:
    def one(token: str) -> int:
        value = tokenizer.convert_tokens_to_ids(token)
        if value is None or value == tokenizer.unk_token_id:
            raise ValueError(f"tokenizer lacks {token}")
        return int(value)

    pad = tokenizer.pad_token_id
    return {
        "image": one("<|image_pad|>"),
        "video": one("<|video_pad|>"),
        "vision_start": one("<|vision_start|>"),
        "vision_end": one("<|vision_end|>"),
        "pad": int(pad) if pad is not None else one("<|endoftext|>"),
    }


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
    ids = _special_ids(tokenizer)
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
