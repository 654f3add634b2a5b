"""The backbone builders: the tiny test model, Qwen3-VL-2B's exact dimensions, the local
tokenizers and the score token ids."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from training_bridge.rigel.backbone import load_backbone, score_token_ids
from training_bridge.rigel.local_backbones import (
    QWEN_FIRST_SPECIAL_ID,
    build_tokenizer,
    qwen3_vl_2b_config,
)


def build_tiny_qwen3_vl(seed: int) -> tuple[Any, Any]:
    """The tiny random Qwen3VLForConditionalGeneration (float32, CPU) and its tokenizer."""
    backbone = load_backbone("tiny", seed=seed)
    return backbone.model, backbone.tokenizer


def test_tiny_model_and_tokenizer_agree_on_special_tokens() -> None:
    model, tokenizer = build_tiny_qwen3_vl(seed=0)
    config = model.config
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert config.video_token_id == tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert config.vision_start_token_id == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    assert config.vision_end_token_id == tokenizer.convert_tokens_to_ids("<|vision_end|>")
    assert config.text_config.vocab_size == len(tokenizer)
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    for token in ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|video_pad|>"):
        assert tokenizer.encode(token, add_special_tokens=False) == [
            tokenizer.convert_tokens_to_ids(token)
        ]


def test_tiny_model_is_deterministic_per_seed() -> None:
    a, _ = build_tiny_qwen3_vl(seed=3)
    b, _ = build_tiny_qwen3_vl(seed=3)
    c, _ = build_tiny_qwen3_vl(seed=4)
    wa = a.model.language_model.layers[0].mlp.up_proj.weight
    assert torch.equal(wa, b.model.language_model.layers[0].mlp.up_proj.weight)
    assert not torch.equal(wa, c.model.language_model.layers[0].mlp.up_proj.weight)


def test_score_token_ids_come_from_the_tokenizer() -> None:
    tiny = build_tokenizer("tiny")
    ids = score_token_ids(tiny)
    assert len(set(ids)) == 5
    assert [tiny.decode([i]) for i in ids] == ["1", "2", "3", "4", "5"]
    assert ids == [tiny.convert_tokens_to_ids(d) for d in "12345"]

    class Shifted:  # a tokenizer that puts the digits elsewhere gives other ids
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [1000 + int(text)]

    assert score_token_ids(Shifted()) == [1001, 1002, 1003, 1004, 1005]

    class Splits:
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [7, 8]

    with pytest.raises(ValueError, match="expected one token"):
        score_token_ids(Splits())


def test_large_tokenizer_puts_special_tokens_at_qwen_ids() -> None:
    tokenizer = build_tokenizer("large")
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") == QWEN_FIRST_SPECIAL_ID == 151643
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") == 151644
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == 151645
    assert tokenizer.convert_tokens_to_ids("<|vision_start|>") == 151652
    assert tokenizer.convert_tokens_to_ids("<|vision_end|>") == 151653
    assert tokenizer.convert_tokens_to_ids("<|image_pad|>") == 151655
    assert tokenizer.convert_tokens_to_ids("<|video_pad|>") == 151656
    assert len(tokenizer) <= 151936
    # Trained merges: an ordinary caption is far shorter than its byte count.
    caption = "a man is throwing a ball in a gym while people watch"
    assert len(tokenizer.encode(caption, add_special_tokens=False)) <= 14


def test_qwen3_vl_2b_config_has_the_published_dimensions() -> None:
    config = qwen3_vl_2b_config()
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size) == (2048, 28, 6144)
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (16, 8, 128)
    assert text.vocab_size == 151936
    assert text.rms_norm_eps == 1e-6
    assert text.max_position_embeddings == 262144
    assert text.rope_parameters["rope_theta"] == 5000000.0
    assert text.rope_parameters["mrope_section"] == [24, 20, 20]
    assert text.rope_parameters["mrope_interleaved"] is True
    assert config.tie_word_embeddings is True
    assert (vision.depth, vision.hidden_size, vision.intermediate_size, vision.num_heads) == (
        24,
        1024,
        4096,
        16,
    )
    assert (vision.patch_size, vision.temporal_patch_size, vision.spatial_merge_size) == (16, 2, 2)
    assert vision.out_hidden_size == 2048
    assert vision.num_position_embeddings == 2304
    assert list(vision.deepstack_visual_indexes) == [5, 11, 17]
    assert vision.hidden_act == "gelu_pytorch_tanh"
    assert (config.image_token_id, config.video_token_id) == (151655, 151656)
    assert (config.vision_start_token_id, config.vision_end_token_id) == (151652, 151653)


def test_qwen3_vl_2b_parameter_count() -> None:
    from transformers import Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(qwen3_vl_2b_config())
    unique = {id(p): p.numel() for p in model.parameters()}
    total = sum(unique.values())
    language = sum(p.numel() for p in model.model.language_model.parameters())
    visual = sum(p.numel() for p in model.model.visual.parameters())
    assert language == 1_720_574_976
    assert visual == 406_957_056
    assert total == 2_127_532_032  # 2.13 B parameters
    assert total == language + visual  # lm_head is tied to the embeddings


def test_load_backbone_tiny() -> None:
    backbone = load_backbone("tiny", device="cpu")
    assert backbone.family == "qwen3_vl"
    assert backbone.score_token_ids == score_token_ids(backbone.tokenizer)
    assert backbone.hidden_size == 64
    assert backbone.tokenizer.padding_side == "left"
    assert backbone.dtype == torch.float32


def test_load_backbone_offline_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(OSError):
        load_backbone(str(tmp_path / "no-such-model"), device="cpu")
