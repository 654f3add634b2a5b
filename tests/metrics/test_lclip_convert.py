"""The L-CLIP converter (`training_bridge.metrics.lclip_convert`) on a synthetic checkpoint of
seed 001's layout — weight-multiplexed blocks (shared attention/MLP, a layer norm pair per
repetition) and a factorised word embedding — built in the test from a tiny CLIP whose layers
share their weights the same way: the converted checkpoint must give that CLIP's embeddings,
and L-CLIPScore must load it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.metrics.tiny_clip import save_tiny_clip
from training_bridge.metrics.lclip_convert import (
    ConversionError,
    convert_lclip_checkpoint,
    convert_lclip_state_dict,
)
from training_bridge.metrics.plugins import MetricItem, Video, available_metrics

torch = pytest.importorskip("torch")
REPEATS = 2
VOCABULARY = 514  # tiny_clip's tokenizer: 2 specials + 2 x 256 byte characters


def multiplexed_clip(
    seed: int = 0, *, repeats: int = REPEATS, factorised: bool = True
) -> tuple[Any, dict[str, Any]]:
    """A tiny QuickGELU CLIP whose consecutive layer pairs share attention and MLP weights, and
    whose token embedding is A Wᵀ + b; and the same weights in L-CLIP's layout."""
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(seed)
    layers = {"intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 2}
    config = CLIPConfig(
        text_config={
            **layers,
            "vocab_size": VOCABULARY,
            "hidden_size": 24,
            "max_position_embeddings": 16,
            "hidden_act": "quick_gelu",
            "eos_token_id": 1,
            "bos_token_id": 0,
            "pad_token_id": 1,
        },
        vision_config={
            **layers,
            "hidden_size": 24,
            "image_size": 32,
            "patch_size": 8,
            "hidden_act": "quick_gelu",
        },
        projection_dim=12,
    )
    model = CLIPModel(config).eval()
    low_rank, up, up_bias = (
        torch.randn(VOCABULARY, 5),
        torch.randn(24, 5) * 0.3,
        torch.randn(24) * 0.1,
    )
    state: dict[str, Any] = {}
    with torch.no_grad():
        model.text_model.embeddings.token_embedding.weight.copy_(low_rank @ up.T + up_bias)
        for tower, prefix in (
            (model.text_model, "student.text_encoder."),
            (model.vision_model, "student.image_encoder.visual."),
        ):
            blocks = tower.encoder.layers
            for shared in range(len(blocks) // repeats):
                first = blocks[shared * repeats]
                root = f"{prefix}transformer.resblocks.{shared}."
                for repeat in range(repeats):
                    layer = blocks[shared * repeats + repeat]
                    for name in ("self_attn", "mlp"):  # share the weights, keep the norms
                        getattr(layer, name).load_state_dict(getattr(first, name).state_dict())
                    for norm, source in (("ln_1", layer.layer_norm1), ("ln_2", layer.layer_norm2)):
                        source.weight.normal_(1.0, 0.2)
                        source.bias.normal_(0.0, 0.1)
                        slot = f"{norm}.instances.{repeat}" if repeats > 1 else norm
                        state[f"{root}{slot}.weight"] = source.weight.clone()
                        state[f"{root}{slot}.bias"] = source.bias.clone()
                attention = first.self_attn
                state[f"{root}attn.in_proj_weight"] = torch.cat(
                    [attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]
                )
                state[f"{root}attn.in_proj_bias"] = torch.cat(
                    [attention.q_proj.bias, attention.k_proj.bias, attention.v_proj.bias]
                )
                state[f"{root}attn.out_proj.weight"] = attention.out_proj.weight.clone()
                state[f"{root}attn.out_proj.bias"] = attention.out_proj.bias.clone()
                state[f"{root}mlp.c_fc.weight"] = first.mlp.fc1.weight.clone()
                state[f"{root}mlp.c_fc.bias"] = first.mlp.fc1.bias.clone()
                state[f"{root}mlp.c_proj.weight"] = first.mlp.fc2.weight.clone()
                state[f"{root}mlp.c_proj.bias"] = first.mlp.fc2.bias.clone()
    text, vision = "student.text_encoder.", "student.image_encoder.visual."
    state.update(
        {
            f"{text}positional_embedding": model.text_model.embeddings.position_embedding.weight.clone(),
            f"{text}ln_final.weight": model.text_model.final_layer_norm.weight.clone(),
            f"{text}ln_final.bias": model.text_model.final_layer_norm.bias.clone(),
            f"{text}text_projection": model.text_projection.weight.T.clone(),
            f"{text}embedding_projection.weight": torch.randn(3, 24),  # distillation-only
            f"{vision}class_embedding": model.vision_model.embeddings.class_embedding.clone(),
            f"{vision}conv1.weight": model.vision_model.embeddings.patch_embedding.weight.clone(),
            f"{vision}positional_embedding": model.vision_model.embeddings.position_embedding.weight.clone(),
            f"{vision}ln_pre.weight": model.vision_model.pre_layrnorm.weight.clone(),
            f"{vision}ln_pre.bias": model.vision_model.pre_layrnorm.bias.clone(),
            f"{vision}ln_post.weight": model.vision_model.post_layernorm.weight.clone(),
            f"{vision}ln_post.bias": model.vision_model.post_layernorm.bias.clone(),
            f"{vision}proj": model.visual_projection.weight.T.clone(),
            "student.logit_scale": model.logit_scale.clone(),
        }
    )
    if factorised:
        state[f"{text}token_embedding.0.weight"] = low_rank
        state[f"{text}token_embedding.1.weight"] = up
        state[f"{text}token_embedding.1.bias"] = up_bias
    else:
        state[f"{text}token_embedding.weight"] = (
            model.text_model.embeddings.token_embedding.weight.clone()
        )
    return model, state


def test_the_multiplexed_factorised_checkpoint_converts_to_the_same_clip() -> None:
    model, state = multiplexed_clip()
    # 2 shared blocks x 2 repetitions per tower (seed 001 Fig. 2's pattern, smaller).
    assert sum(key.endswith("attn.in_proj_weight") for key in state) == 4
    conversion = convert_lclip_state_dict(state, text_heads=2, vision_heads=2)
    assert (conversion.text_layers, conversion.vision_layers) == (4, 4)
    assert conversion.factorised_embedding
    expected = model.state_dict()
    for key, value in conversion.state_dict.items():
        torch.testing.assert_close(value, expected[key], rtol=1e-5, atol=1e-5, msg=key)
    assert set(expected) - set(conversion.state_dict) <= {
        "text_model.embeddings.position_ids",
        "vision_model.embeddings.position_ids",
    }
    assert conversion.config["text_config"]["num_hidden_layers"] == 4
    assert conversion.config["vision_config"]["image_size"] == 32


def test_the_converted_checkpoint_gives_l_clipscore_the_same_embeddings(tmp_path: Path) -> None:
    from transformers import CLIPModel

    tokenizer = save_tiny_clip(tmp_path / "tokenizer")
    model, state = multiplexed_clip(seed=1)
    torch.save({"state_dict": state}, tmp_path / "lclip.pth")
    conversion = convert_lclip_checkpoint(
        tmp_path / "lclip.pth",
        tmp_path / "converted",
        tokenizer_from=tokenizer,
        text_heads=2,
        vision_heads=2,
    )
    converted = CLIPModel.from_pretrained(tmp_path / "converted").eval()
    ids = torch.tensor([[0, 5, 17, 42, 1]])
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        for original_features, converted_features in (
            (model.get_text_features(input_ids=ids), converted.get_text_features(input_ids=ids)),
            (
                model.get_image_features(pixel_values=pixels),
                converted.get_image_features(pixel_values=pixels),
            ),
        ):
            original_features = getattr(original_features, "pooler_output", original_features)
            converted_features = getattr(converted_features, "pooler_output", converted_features)
            torch.testing.assert_close(converted_features, original_features, rtol=1e-4, atol=1e-4)
    assert conversion.factorised_embedding
    metrics, unavailable = available_metrics(
        {"lclip_model": str(tmp_path / "converted")}, ["lclipscore"]
    )
    assert unavailable == {}
    frames = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    score = metrics["lclipscore"].score([MetricItem("a", (), Video.of("v", frames))])
    assert len(score) == 1 and 0.0 <= score[0] <= 2.5


def test_attention_transformations_are_refused() -> None:
    _, state = multiplexed_clip()
    state["student.image_encoder.visual.transformer.resblocks.1.attn.conv_l.instances.0.weight"] = (
        torch.zeros(2, 2, 1, 1)
    )
    with pytest.raises(ConversionError, match=r"attn\.conv_l"):
        convert_lclip_state_dict(state)
    _, state = multiplexed_clip()
    del state["student.text_encoder.transformer.resblocks.0.ln_2.instances.1.bias"]
    with pytest.raises(ConversionError, match=r"lacks ln_2\.instances\.1\.bias"):
        convert_lclip_state_dict(state)


def test_a_plain_openai_layout_converts_too() -> None:
    """PAC-S's and FactVC's checkpoints: one layer per block, a full embedding table."""
    model, state = multiplexed_clip(seed=2, repeats=1, factorised=False)
    conversion = convert_lclip_state_dict(state, text_heads=2, vision_heads=2)
    assert (conversion.text_layers, conversion.vision_layers, conversion.factorised_embedding) == (
        4,
        4,
        False,
    )
    expected = model.state_dict()
    for key, value in conversion.state_dict.items():
        torch.testing.assert_close(value, expected[key], msg=key)


def test_lora_adapters_are_refused_or_folded_in() -> None:
    """PAC-S++'s LoRA pairs: refused without a scaling, W + s · B A with one."""
    model, state = multiplexed_clip(seed=4, repeats=1, factorised=False)
    root = "student.text_encoder.transformer.resblocks.2."
    generator = torch.Generator().manual_seed(0)
    pairs = {
        "attn.in_proj_weight": (
            torch.randn(4, 24, generator=generator),
            torch.randn(72, 4, generator=generator),
        ),
        "mlp.c_fc.weight": (
            torch.randn(4, 24, generator=generator),
            torch.randn(48, 4, generator=generator),
        ),
    }
    originals = {name: state[root + name].clone() for name in pairs}
    state[root + "attn.in_proj_weight_lora_A"], state[root + "attn.in_proj_weight_lora_B"] = pairs[
        "attn.in_proj_weight"
    ]
    state[root + "mlp.c_fc.lora_A"], state[root + "mlp.c_fc.lora_B"] = pairs["mlp.c_fc.weight"]
    with pytest.raises(ConversionError, match=r"in_proj_weight_lora_A.*give lora_scaling"):
        convert_lclip_state_dict(state)
    conversion = convert_lclip_state_dict(state, lora_scaling=0.25)
    layer = "text_model.encoder.layers.2."
    in_proj = (
        originals["attn.in_proj_weight"]
        + 0.25 * pairs["attn.in_proj_weight"][1] @ pairs["attn.in_proj_weight"][0]
    )
    torch.testing.assert_close(
        conversion.state_dict[layer + "self_attn.q_proj.weight"], in_proj[:24]
    )
    torch.testing.assert_close(
        conversion.state_dict[layer + "self_attn.v_proj.weight"], in_proj[48:]
    )
    fc1 = (
        originals["mlp.c_fc.weight"]
        + 0.25 * pairs["mlp.c_fc.weight"][1] @ pairs["mlp.c_fc.weight"][0]
    )
    torch.testing.assert_close(conversion.state_dict[layer + "mlp.fc1.weight"], fc1)
    # The other layers are untouched.
    torch.testing.assert_close(
        conversion.state_dict["text_model.encoder.layers.1.mlp.fc1.weight"],
        model.state_dict()["text_model.encoder.layers.1.mlp.fc1.weight"],
    )
