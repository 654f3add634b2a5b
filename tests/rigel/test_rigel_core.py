"""The method's small pieces, on CPU and without Django: loss, head, scoring, Phase 1, config."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.rigel.oracles import emd_1d, phase1_distillation_loss
from training_bridge.rigel.config import Ablation, RigelConfig
from training_bridge.rigel.head import build_head, count_parameters
from training_bridge.rigel.losses import phase2_loss
from training_bridge.rigel.phase1 import predict_scores, train_head
from training_bridge.rigel.scoring import expected_rating, normalised_score


def test_emd_loss_matches_a_hand_computed_value():
    # p = (.1 .2 .3 .3 .1) has CDF (.1 .3 .6 .9 1); q = (.4 .3 .1 .1 .1) has CDF (.4 .7 .8 .9 1);
    # |difference| = (.3 .4 .2 0 0), so EMD = 0.9 and with T = 2 the loss is 0.9 * 4 = 3.6. The
    # second row compares q with itself (0), so the batch mean is 1.8.
    temperature = 2.0
    p = torch.tensor([0.1, 0.2, 0.3, 0.3, 0.1])
    q = torch.tensor([0.4, 0.3, 0.1, 0.1, 0.1])
    student = torch.stack([temperature * p.log(), temperature * q.log()])
    teacher = torch.stack([temperature * q.log(), temperature * q.log()])
    assert emd_1d(p[None], q[None]).item() == pytest.approx(0.9, abs=1e-6)
    loss = phase1_distillation_loss(student, teacher, temperature)
    assert loss.item() == pytest.approx(1.8, abs=1e-5)


def test_emd_counts_the_distance_between_labels_unlike_kl():
    one = torch.tensor([[1.0, 0, 0, 0, 0]])
    two = torch.tensor([[0, 1.0, 0, 0, 0]])
    five = torch.tensor([[0, 0, 0, 0, 1.0]])
    assert emd_1d(one, two).item() == pytest.approx(1.0)
    assert emd_1d(one, five).item() == pytest.approx(4.0)


def test_phase2_loss_is_cross_entropy_against_the_class_index():
    logits = torch.tensor([[0.0, 0.0, math.log(2.0), 0.0, 0.0]])
    # softmax puts 2/6 on index 2: CE = -log(1/3)
    assert phase2_loss(logits, torch.tensor([2])).item() == pytest.approx(math.log(3.0), abs=1e-6)


def test_head_has_the_papers_parameter_count_at_hidden_2048():
    assert count_parameters(build_head(2048)) == 2_625_541  # the paper's "2.63M"


def test_score_is_the_expectation_normalised_to_unit_interval():
    certain_five = torch.tensor([[-1e4, -1e4, -1e4, -1e4, 0.0]])
    uniform = torch.zeros(1, 5)
    assert expected_rating(certain_five).item() == pytest.approx(5.0)
    assert normalised_score(certain_five).item() == pytest.approx(1.0)
    assert expected_rating(uniform).item() == pytest.approx(3.0)
    assert normalised_score(uniform).item() == pytest.approx(0.5)
    half = torch.log(torch.tensor([[0.5, 0.0 + 1e-12, 0.0 + 1e-12, 0.0 + 1e-12, 0.5]]))
    assert normalised_score(half).item() == pytest.approx(0.5, abs=1e-6)


def test_normalised_score_of_certain_and_uniform_logits_in_a_batch() -> None:
    logits = torch.full((3, 5), -1e9)
    logits[0, 0] = logits[1, 4] = 0.0
    logits[2] = 0.0
    assert normalised_score(logits).tolist() == pytest.approx([0.0, 1.0, 0.5])


def _synthetic(samples: int, hidden: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    states = torch.randn(samples, hidden, generator=torch.Generator().manual_seed(seed))
    direction = torch.randn(hidden, 5, generator=torch.Generator().manual_seed(99))
    return states, states @ direction * (3 / hidden**0.5)


def test_phase1_learns_the_teacher_and_keeps_the_best_epoch():
    train_hidden, train_logits = _synthetic(512, 32, seed=1)
    validation_hidden, validation_logits = _synthetic(128, 32, seed=2)
    human = normalised_score(validation_logits).numpy()
    seen: list[tuple[int, float, float]] = []
    result = train_head(
        train_hidden=train_hidden,
        train_score_logits=train_logits,
        validation_hidden=validation_hidden,
        validation_human=human,
        temperature=2.0,
        learning_rate=3e-3,
        epochs=12,
        patience=3,
        threads=1,
        on_epoch=lambda epoch, loss, tau: seen.append((epoch, loss, tau)),
    )
    assert [epoch for epoch, _, _ in seen] == list(range(1, result.epochs_run + 1))
    taus = [tau for _, _, tau in seen]
    assert result.best_tau == pytest.approx(max(taus))
    assert result.best_epoch == taus.index(max(taus)) + 1
    # the head returned is the best epoch's: its tau on validation is the recorded best
    from training_bridge.rigel.phase1 import kendall_tau_b

    assert kendall_tau_b(predict_scores(result.head, validation_hidden), human) == pytest.approx(
        result.best_tau
    )
    assert result.best_tau > 0.5
    assert seen[-1][1] < seen[0][1]  # the distillation loss went down


def test_phase1_in_bf16_learns_as_well_and_keeps_float32_weights():
    train_hidden, train_logits = _synthetic(512, 32, seed=1)
    validation_hidden, validation_logits = _synthetic(128, 32, seed=2)
    human = normalised_score(validation_logits).numpy()
    common = {
        "train_hidden": train_hidden,
        "train_score_logits": train_logits,
        "validation_hidden": validation_hidden,
        "validation_human": human,
        "temperature": 2.0,
        "learning_rate": 3e-3,
        "epochs": 8,
        "early_stopping": False,
        "threads": 1,
    }
    exact = train_head(**common)
    bf16 = train_head(**common, precision="bf16")
    assert all(parameter.dtype == torch.float32 for parameter in bf16.head.parameters())
    assert bf16.best_tau > 0.5
    assert bf16.best_tau == pytest.approx(exact.best_tau, abs=0.05)
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16"):
        train_head(**common, precision="fp16")


def test_phase1_stops_after_patience_epochs_without_improvement():
    train_hidden, train_logits = _synthetic(128, 16, seed=3)
    validation_hidden, _ = _synthetic(64, 16, seed=4)
    noise = np.random.default_rng(0).random(64)  # unrelated to anything: tau stalls at once
    result = train_head(
        train_hidden=train_hidden,
        train_score_logits=train_logits,
        validation_hidden=validation_hidden,
        validation_human=noise,
        temperature=1.0,
        learning_rate=1e-6,
        epochs=50,
        patience=2,
        threads=1,
    )
    assert result.stopped_early
    assert result.epochs_run == result.best_epoch + 2


def test_config_round_trips_and_refuses_unknown_or_bad_values():
    config = RigelConfig(backbone="tiny", ablation=Ablation.PHASE1_ONLY, phase1_epochs=3)
    assert RigelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown Rigel settings: lerning_rate"):
        RigelConfig.from_dict({"lerning_rate": 1})
    with pytest.raises(ValueError, match="ablation must be one of"):
        RigelConfig(ablation="nothing")
    assert RigelConfig().torch_dtype_name == "float32"
    assert RigelConfig(device="cuda").torch_dtype_name == "bfloat16"


def test_lora_targets_the_language_model_only():
    import re

    pattern = re.compile(RigelConfig().lora_target_regex())  # the paper's q_proj, v_proj
    assert pattern.fullmatch("model.language_model.layers.0.self_attn.q_proj")
    assert pattern.fullmatch("base_model.model.model.language_model.layers.3.self_attn.v_proj")
    assert not pattern.fullmatch("model.language_model.layers.3.mlp.down_proj")
    wide = re.compile(RigelConfig(lora_targets="wide").lora_target_regex())
    assert wide.fullmatch("base_model.model.model.language_model.layers.3.mlp.down_proj")
    assert not wide.fullmatch("model.visual.blocks.0.mlp.gate_proj")
    assert not pattern.fullmatch("model.visual.blocks.0.mlp.gate_proj")  # Qwen2.5-VL vision MLP
    assert not pattern.fullmatch("model.visual.blocks.0.attn.qkv")
    assert not pattern.fullmatch("lm_head")


def test_evaluation_puts_rigel_beside_the_standard_metrics_with_scipy_statistics():
    from scipy import stats

    from training_bridge.metrics.standard import standard_metric_scores
    from training_bridge.rigel.evaluate import evaluate_split

    candidates = ["a man plays a guitar", "a dog runs", "a woman cooks food", "people", "a cat"]
    references = [
        ["a man is playing a guitar", "someone plays guitar"],
        ["a dog is running on grass"],
        ["a woman cooks in the kitchen"],
        ["two people talk"],
        ["a black cat sleeps on a sofa"],
    ]
    human = np.array([0.9, 0.6, 0.8, 0.1, 0.4])
    rigel = np.array([0.7, 0.5, 0.9, 0.2, 0.3])
    block = evaluate_split(
        rigel_scores=rigel,
        human=human,
        candidates=candidates,
        references=references,
        standard_metrics=("bleu4", "rougeL", "cider"),  # METEOR's JVM: tested with the metrics
    )
    assert block["n"] == 5
    assert block["rows"]["rigel"]["kendall_b"] == pytest.approx(
        100 * stats.kendalltau(rigel, human).statistic, abs=1e-3
    )
    assert block["rows"]["rigel"]["spearman"] == pytest.approx(
        100 * stats.spearmanr(rigel, human).statistic, abs=1e-3
    )
    cider = standard_metric_scores(candidates, references, metrics=("cider",))["cider"]
    assert block["rows"]["cider"]["kendall_c"] == pytest.approx(
        100 * stats.kendalltau(cider, human, variant="c").statistic, abs=1e-3
    )
    assert set(block["rows"]) == {"rigel", "bleu4", "rougeL", "cider"}
