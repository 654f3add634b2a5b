"""Phase 1's written-out training step against autograd over the same head."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.rigel.oracles import phase1_distillation_loss, phase1_kl_loss
from training_bridge.rigel.head import build_head
from training_bridge.rigel.phase1 import HeadStep, bf16_cpu_products, bf16_matmul_hardware

HIDDEN, BATCH, TEMPERATURE = 48, 16, 2.0


def _autograd_step(
    head: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    teacher_logits: torch.Tensor,
    masks: tuple[torch.Tensor, torch.Tensor] | None,
    objective: str = "emd",
) -> float:
    net = head.net
    hidden = torch.nn.functional.gelu(net[0](inputs))
    if masks is not None:
        hidden = hidden * masks[0]
    hidden = torch.nn.functional.gelu(net[3](hidden))
    if masks is not None:
        hidden = hidden * masks[1]
    loss_fn = phase1_kl_loss if objective == "kl" else phase1_distillation_loss
    loss = loss_fn(net[6](hidden), teacher_logits, TEMPERATURE)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach()) * inputs.shape[0]


@pytest.mark.parametrize(("dropout", "objective"), [(0.0, "emd"), (0.3, "emd"), (0.3, "kl")])
def test_the_written_out_step_equals_autograd_and_torch_adam(
    dropout: float, objective: str
) -> None:
    generator = torch.Generator().manual_seed(0)
    head = build_head(HIDDEN, dropout=dropout, seed=1).train()
    reference = copy.deepcopy(head)
    step = HeadStep(
        head,
        batch_size=BATCH,
        temperature=TEMPERATURE,
        learning_rate=1e-2,
        weight_decay=0.01,
        dropout=dropout,
        seed=3,
        objective=objective,
    )
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-2, weight_decay=0.01, fused=True)
    for size in (BATCH, BATCH, BATCH, 11):  # the last batch of an epoch is short
        inputs = torch.randn(size, HIDDEN, generator=generator)
        teacher_logits = 3 * torch.randn(size, 5, generator=generator)
        wanted = torch.softmax(teacher_logits / TEMPERATURE, dim=-1)
        loss = float(step(inputs, wanted))
        masks = (step.mask[0][:size], step.mask[1][:size]) if dropout else None
        expected = _autograd_step(reference, optimizer, inputs, teacher_logits, masks, objective)
        assert loss == pytest.approx(expected, rel=1e-5)
        for mine, theirs in zip(head.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    # the weights moved: the comparison above is not between two untouched heads
    untouched = build_head(HIDDEN, dropout=dropout, seed=1)
    assert (head.net[0].weight - untouched.net[0].weight).abs().max() > 1e-3


def test_dropout_masks_keep_the_right_share_and_scale() -> None:
    head = build_head(256, dropout=0.1, seed=0).train()
    step = HeadStep(
        head,
        batch_size=64,
        temperature=TEMPERATURE,
        learning_rate=1e-3,
        weight_decay=0.0,
        dropout=0.1,
        seed=5,
    )
    kept = []
    for _ in range(20):
        step._masks(64)
        for mask in step.mask:
            torch.testing.assert_close(
                torch.unique(mask), torch.tensor([0.0, 1 / 0.9]), rtol=1e-6, atol=0
            )
            kept.append((mask > 0).float().mean().item())
    share = sum(kept) / len(kept)  # 40 masks of 64 x (128 or 64) units
    assert share == pytest.approx(0.9, abs=0.005)
    # a new step draws new masks
    first = step.mask[0].clone()
    step._masks(64)
    assert not torch.equal(first, step.mask[0])


def test_bf16_precision_rounds_the_products_exactly_where_torch_uses_bf16() -> None:
    """On a machine where the probe finds bf16 products, realistic products are rounded as bf16
    inputs round them (and only inside the context); elsewhere they stay float32."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(64, 2048, generator=generator)
    b = torch.randn(2048, 1024, generator=generator)
    exact = a.double() @ b.double()
    with bf16_cpu_products(True):
        product = torch.mm(a, b)
    relative = ((product.double() - exact).norm() / exact.norm()).item()
    if bf16_matmul_hardware():
        assert 1e-3 < relative < 1e-2  # bf16 inputs: 8 significant bits
    else:
        assert relative < 1e-5  # float32 products, whichever library ran them
    # the setting is restored afterwards
    assert ((torch.mm(a, b).double() - exact).norm() / exact.norm()).item() < 1e-5
