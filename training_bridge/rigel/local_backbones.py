"""The backbones built locally, with random weights, for tests and benchmarks: their tokenizers
(byte-level BPE trained with the `tokenizers` library on our prompts and the VATEX-EVAL captions,
Qwen's special tokens at Qwen's ids in the large one) and their transformers configurations (tiny
Qwen3-VL and Qwen2.5-VL, and Qwen3-VL-2B-Instruct's exact dimensions). `backbone.load_backbone`
builds them by name. No Django import.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

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

    return _tiny_vl_config(
        Qwen3VLConfig,
        tokenizer,
        head_dim=32,
        rope=_text_rope(5000000.0, [6, 5, 5]),
        patch_size=16,
        vision={"num_position_embeddings": 64, "deepstack_visual_indexes": [0]},
    )


def tiny_qwen2_5_vl_config(tokenizer: Any) -> Any:
    from transformers import Qwen2_5_VLConfig

    return _tiny_vl_config(
        Qwen2_5_VLConfig,
        tokenizer,
        head_dim=None,
        rope={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]},
        patch_size=14,
        vision={"window_size": 112, "fullatt_block_indexes": [1]},
    )


def _tiny_vl_config(
    config_class: Any,
    tokenizer: Any,
    *,
    head_dim: int | None,
    rope: dict[str, Any],
    patch_size: int,
    vision: dict[str, Any],
) -> Any:
    """The two tiny families share every size; only the rope, the patch and the vision tower's
    family-specific keys differ (keys kept in the order the configs always had)."""
    ids = special_ids(tokenizer)
    text: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
    }
    if head_dim is not None:
        text["head_dim"] = head_dim
    text.update(
        {
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "pad_token_id": ids["pad"],
            "rope_parameters": rope,
        }
    )
    return config_class(
        text_config=text,
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": patch_size,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 64,
            **vision,
        },
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
        tie_word_embeddings=True,
    )


def special_ids(tokenizer: Any) -> dict[str, int]:
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
