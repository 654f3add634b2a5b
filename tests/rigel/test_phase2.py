"""Phase 2 on the tiny random Qwen3-VL: LoRA on the language model only; the scoring head and the
vision tower receive no gradient; checkpoints resume to the same weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.rigel.release_support import tiny_settings, write_release
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.data import ExampleLoader, read_release
from training_bridge.rigel.head import build_head
from training_bridge.rigel.inputs import RigelExample, build_batch
from training_bridge.rigel.losses import phase2_loss
from training_bridge.rigel.phase2 import (
    apply_lora,
    deserialise_checkpoint,
    lora_state,
    train_phase2,
)
from training_bridge.rigel.score_logits import head_score_logits
from training_bridge.rigel.store import LocalStore


def _examples(count: int) -> list[RigelExample]:
    rng = np.random.default_rng(5)
    return [
        RigelExample(
            references=["a man plays a guitar on a stage"],
            candidate=f"a person plays music {index}",
            frames=rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8),
        )
        for index in range(count)
    ]


def test_lora_sits_on_the_language_model_and_gradients_skip_head_and_vision():
    torch.manual_seed(0)
    backbone = load_backbone("tiny", device="cpu")
    config = RigelConfig(backbone="tiny", lora_dropout=0.0, lora_targets="wide")
    head = build_head(backbone.hidden_size, seed=0)
    for parameter in head.parameters():
        parameter.requires_grad_(False)
    peft_model = apply_lora(backbone, config)
    trainable = [name for name, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name and "language_model" in name for name in trainable)
    targets = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trainable}
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    layers = backbone.model.config.text_config.num_hidden_layers
    assert len(trainable) == 2 * 7 * layers  # A and B of seven projections per layer

    batch = build_batch(_examples(3), backbone, reference_free=False)
    logits = head_score_logits(backbone, head, batch)
    loss = phase2_loss(logits, torch.tensor([0, 2, 4]))
    loss.backward()
    assert all(p.grad is None for p in head.parameters())
    visual = list(backbone.visual.parameters())
    assert visual and all(p.grad is None and not p.requires_grad for p in visual)
    lora_b = [p for name, p in peft_model.named_parameters() if "lora_B" in name]
    assert all(p.grad is not None for p in lora_b)
    assert any(float(p.grad.abs().sum()) > 0 for p in lora_b)


def test_train_phase2_changes_only_lora_and_resumes_from_a_checkpoint(tmp_path):
    store = LocalStore(tmp_path)
    write_release(store, "releases/9", clips={"train": 2, "validation": 1}, seed=9)
    records = read_release(store, "releases/9")["train"]
    config = RigelConfig(
        backbone="tiny",
        **tiny_settings(phase2_batch_size=2, phase2_micro_batch_size=1),
        lora_dropout=0.0,
    )

    def fresh():  # type: ignore[no-untyped-def]
        torch.manual_seed(0)
        backbone = load_backbone("tiny", device="cpu")
        head = build_head(backbone.hidden_size, seed=0)
        apply_lora(backbone, config)
        return backbone, head

    backbone, head = fresh()
    head_before = {k: v.clone() for k, v in head.state_dict().items()}
    visual_before = {k: v.clone() for k, v in backbone.visual.state_dict().items()}
    checkpoints: dict[int, bytes] = {}
    result = train_phase2(
        backbone=backbone,
        head=head,
        loader=ExampleLoader(store, frames=4),
        records=records,
        config=config,
        on_checkpoint=lambda step, data: checkpoints.__setitem__(step, data),
    )
    assert result.steps == 4  # 8 train samples at a global batch of 2
    assert sorted(checkpoints) == [1, 2, 3]  # every step but the last
    assert all(torch.equal(head.state_dict()[k], v) for k, v in head_before.items())
    assert all(torch.equal(backbone.visual.state_dict()[k], v) for k, v in visual_before.items())
    final = lora_state(backbone.extra["peft_model"])
    assert any(float(t.abs().sum()) > 0 for k, t in final.items() if "lora_B" in k)

    resumed_backbone, resumed_head = fresh()
    resumed = train_phase2(
        backbone=resumed_backbone,
        head=resumed_head,
        loader=ExampleLoader(store, frames=4),
        records=records,
        config=config,
        resume=checkpoints[2],
    )
    assert resumed.resumed_from_step == 2
    assert [point["step"] for point in resumed.history] == [1, 2, 3, 4]
    again = lora_state(resumed_backbone.extra["peft_model"])
    for name, tensor in final.items():
        torch.testing.assert_close(again[name], tensor, rtol=1e-4, atol=1e-6)
    assert resumed.mean_loss == pytest.approx(result.mean_loss, rel=1e-4)


def test_losses_read_one_step_late_change_nothing_but_the_callbacks_timing(tmp_path):
    store = LocalStore(tmp_path)
    write_release(store, "releases/9", clips={"train": 2, "validation": 1}, seed=9)
    records = read_release(store, "releases/9")["train"]
    config = RigelConfig(
        backbone="tiny",
        **tiny_settings(phase2_batch_size=2, phase2_micro_batch_size=1),
        lora_dropout=0.0,
    )
    runs = {}
    for overlap in (False, True):
        torch.manual_seed(0)
        backbone = load_backbone("tiny", device="cpu")
        head = build_head(backbone.hidden_size, seed=0)
        apply_lora(backbone, config)
        calls: list[tuple[int, float]] = []  # (step, loss) of each callback, in order
        checkpoints: dict[int, bytes] = {}
        result = train_phase2(
            backbone=backbone,
            head=head,
            loader=ExampleLoader(store, frames=4),
            records=records,
            config=config,
            on_step=lambda done, total, loss, calls=calls: calls.append((done, loss)),
            on_checkpoint=lambda step, data, c=checkpoints: c.__setitem__(step, data),
            overlap_host=overlap,
        )
        runs[overlap] = (result, calls, checkpoints, lora_state(backbone.extra["peft_model"]))
    (plain, plain_calls, plain_ckpt, plain_lora), (late, late_calls, late_ckpt, late_lora) = (
        runs[False],
        runs[True],
    )
    assert [c[0] for c in late_calls] == [1, 2, 3, 4] == [c[0] for c in plain_calls]
    assert [c[1] for c in late_calls] == [c[1] for c in plain_calls]
    assert late.history == plain.history and late.mean_loss == plain.mean_loss
    assert sorted(late_ckpt) == sorted(plain_ckpt) == [1, 2, 3]
    for step in plain_ckpt:  # a checkpoint holds the history up to its own step
        history = deserialise_checkpoint(late_ckpt[step])["history"]
        assert [point["step"] for point in history] == list(range(1, step + 1))
    for name, tensor in plain_lora.items():
        assert torch.equal(late_lora[name], tensor)


def test_lora_weights_are_float32_master_weights_unless_set():
    cpu = RigelConfig(backbone="tiny")
    assert cpu.lora_dtype_name == "float32"
    assert RigelConfig(backbone="tiny", device="cuda").lora_dtype_name == "float32"
    assert RigelConfig(backbone="tiny", device="cuda", lora_dtype="bfloat16").lora_dtype_name == (
        "bfloat16"
    )
    assert RigelConfig(backbone="tiny", device="cuda", lora_dtype="float32").lora_dtype_name == (
        "float32"
    )
    with pytest.raises(ValueError, match="lora_dtype"):
        RigelConfig(backbone="tiny", lora_dtype="int8")

    backbone = load_backbone("tiny", device="cpu")
    peft_model = apply_lora(backbone, cpu.replace(lora_dtype="bfloat16"))
    adapters = [p for p in peft_model.parameters() if p.requires_grad]
    assert adapters and {p.dtype for p in adapters} == {torch.bfloat16}
    # The frozen backbone keeps its own dtype.
    assert {p.dtype for p in backbone.visual.parameters()} == {torch.float32}
