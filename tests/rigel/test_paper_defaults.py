"""The paper's training defaults (Appendix D, Table 4): LoRA on q_proj and v_proj (1.61M trainable
parameters at Qwen3-VL-2B's dimensions), Adam with weight decay 0.01 in Phase 2; the wider target
set and AdamW one setting away."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from training_bridge.rigel.backbone import load_backbone, qwen3_vl_2b_config
from training_bridge.rigel.config import (
    DEFAULT_LORA_TARGETS,
    WIDE_LORA_TARGETS,
    Ablation,
    RigelConfig,
)
from training_bridge.rigel.phase2 import apply_lora, make_phase2_optimizer, trainable_parameters


def _meta_qwen3_vl_2b() -> SimpleNamespace:
    """Qwen3-VL-2B-Instruct's architecture on the meta device: shapes, no weights."""
    from transformers import Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration._from_config(
            qwen3_vl_2b_config(), dtype=torch.bfloat16
        )
    return SimpleNamespace(model=model, extra={})


def _trainable_count(targets: object) -> tuple[int, set[str]]:
    backbone = _meta_qwen3_vl_2b()
    config = RigelConfig(lora_targets=targets)  # the default backbone is Qwen3-VL-2B
    peft_model = apply_lora(backbone, config)
    named = trainable_parameters(peft_model)
    modules = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name, _ in named}
    return sum(p.numel() for _, p in named), modules


def test_the_default_adapts_the_papers_1_61m_parameters_of_qwen3_vl_2b():
    assert RigelConfig().lora_targets == DEFAULT_LORA_TARGETS == ("q_proj", "v_proj")
    count, modules = _trainable_count(RigelConfig().lora_targets)
    # 28 layers x r 8 x ((2048 + 2048) + (2048 + 1024)): q is 2048 -> 2048, v is 2048 -> 8 x 128
    assert count == 28 * 8 * ((2048 + 2048) + (2048 + 1024)) == 1_605_632
    assert modules == {"q_proj", "v_proj"}


def test_the_wide_target_set_is_one_setting_away():
    config = RigelConfig.from_dict({"lora_targets": "wide"})
    assert config.lora_targets == WIDE_LORA_TARGETS
    count, modules = _trainable_count("wide")
    per_layer = 8 * ((2048 + 2048) * 2 + (2048 + 1024) * 2 + (2048 + 6144) * 2 + (6144 + 2048))
    assert count == 28 * per_layer == 8_716_288
    assert modules == set(WIDE_LORA_TARGETS)
    # a list works too, as the API sends it, and survives the round trip through the run row
    listed = RigelConfig.from_dict({"lora_targets": ["q_proj", "k_proj"]})
    assert RigelConfig.from_dict(listed.to_dict()).lora_targets == ("q_proj", "k_proj")


def test_phase2_uses_adam_with_weight_decay_and_adamw_on_request():
    torch.manual_seed(0)
    parameter = torch.nn.Parameter(torch.ones(3))
    config = RigelConfig(backbone="tiny")
    assert (config.phase2_optimizer, config.phase2_weight_decay) == ("adam", 0.01)
    optimizer = make_phase2_optimizer([parameter], config)
    assert type(optimizer) is torch.optim.Adam
    assert optimizer.param_groups[0]["weight_decay"] == 0.01
    adamw = make_phase2_optimizer([parameter], config.replace(phase2_optimizer="adamw"))
    assert type(adamw) is torch.optim.AdamW
    with pytest.raises(ValueError, match="phase2_optimizer"):
        RigelConfig(phase2_optimizer="sgd")


def test_adam_adds_the_decay_to_the_gradient_unlike_adamw():
    """One step from the same weights and gradient: the two optimisers differ, so the setting
    really changes what Phase 2 computes."""
    results = []
    for kind in ("adam", "adamw"):
        parameter = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
        optimizer = make_phase2_optimizer(
            [parameter], RigelConfig(phase2_optimizer=kind, phase2_learning_rate=0.1)
        )
        parameter.grad = torch.tensor([0.5, 0.0, -0.1])
        optimizer.step()
        results.append(parameter.detach().clone())
    # Adam: the decay enters the normalised step (the zero-gradient weight moves by a full lr);
    # AdamW: it shrinks the weight by lr x wd outside it
    assert float(results[0][1]) == pytest.approx(-2.0 + 0.1, abs=1e-6)
    assert float(results[1][1]) == pytest.approx(-2.0 * (1 - 0.1 * 0.01), abs=1e-6)


def test_ablation_spellings_of_the_command_line():
    assert RigelConfig(ablation="no-phase2").ablation == Ablation.PHASE1_ONLY
    assert RigelConfig(ablation="kl-loss").phase1_objective == "kl"
    assert RigelConfig().phase1_objective == "emd"
    for name in ("lm-head", "random-head"):
        assert RigelConfig(ablation=name).ablation == name.replace("-", "_")


def test_the_tiny_backbone_takes_the_default_targets():
    backbone = load_backbone("tiny", device="cpu")
    peft_model = apply_lora(backbone, RigelConfig(backbone="tiny"))
    modules = {
        name.split(".lora_")[0].rsplit(".", 1)[-1] for name, _ in trainable_parameters(peft_model)
    }
    assert modules == {"q_proj", "v_proj"}
