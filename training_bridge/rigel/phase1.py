"""Phase 1: distil the frozen backbone's score judgement into the MLP scoring head (Section 3.1).

Everything here runs on cached tensors (the teacher pass already read every sample once), so an
epoch over tens of thousands of samples is a few seconds of matrix products:

- the whole training set sits in one float32 tensor; a batch is an `index_select` into a reused
  buffer (no DataLoader, no per-sample Python);
- the teacher's temperature softmax is computed once, not per epoch;
- Adam runs as the fused kernel; validation is one inference-mode pass in large chunks;
- `precision="bf16"` runs the head's matrix products under bf16 autocast (weights, optimiser
  state, softmax and loss stay float32). Off by default: on the GPU hosts' AMX CPUs it saved 7%
  on one host and lost on another (docs/benchmarks.md), not worth a less exact default.

Early stopping follows Appendix D: Kendall's tau (tau_b) of the head's score against the human
normalised scores on the validation split after every epoch; stop after `patience` epochs without
improvement and keep the best epoch's weights.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy import stats

from training_bridge.rigel.head import ScoringHead, build_head
from training_bridge.rigel.losses import emd_1d
from training_bridge.rigel.scoring import normalised_score

# Called after every epoch with (epoch, mean training loss, validation tau); may raise to stop
# (the Django side raises JobCancelled there).
EpochCallback = Callable[[int, float, float], None]


@dataclass
class Phase1Result:
    head: ScoringHead
    best_epoch: int  # 1-based; 0 when no epoch improved on an untrained head (never in practice)
    best_tau: float
    epochs_run: int
    stopped_early: bool
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "best_epoch": self.best_epoch,
            "best_validation_tau": self.best_tau,
            "epochs_run": self.epochs_run,
            "stopped_early": self.stopped_early,
            "seconds": round(self.seconds, 3),
        }


PRECISIONS = ("fp32", "bf16")


def kendall_tau_b(predicted: np.ndarray, human: np.ndarray) -> float:
    if len(predicted) < 2 or np.all(predicted == predicted[0]):
        return float("nan")
    return float(stats.kendalltau(predicted, human, variant="b").statistic)


@torch.inference_mode()
def predict_scores(head: ScoringHead, hidden: torch.Tensor, *, chunk: int = 8192) -> np.ndarray:
    """Normalised scores in [0, 1] for cached hidden states."""
    was_training = head.training
    head.eval()
    parts = [
        normalised_score(head(hidden[start : start + chunk].float())).cpu()
        for start in range(0, hidden.shape[0], chunk)
    ]
    head.train(was_training)
    if not parts:
        return np.zeros(0)
    return torch.cat(parts).double().numpy()


def train_head(
    *,
    train_hidden: torch.Tensor,
    train_score_logits: torch.Tensor,
    validation_hidden: torch.Tensor,
    validation_human: np.ndarray | torch.Tensor,
    temperature: float,
    learning_rate: float = 1e-3,
    weight_decay: float = 0.01,
    batch_size: int = 64,
    epochs: int = 50,
    patience: int = 5,
    dropout: float = 0.1,
    seed: int = 0,
    early_stopping: bool = True,
    on_epoch: EpochCallback | None = None,
    threads: int | None = None,
    device: str = "cpu",
    precision: str = "fp32",
) -> Phase1Result:
    """Train a fresh head to match softmax(teacher / T) under EMD x T^2; return the best epoch's."""
    if train_hidden.ndim != 2 or train_score_logits.shape != (train_hidden.shape[0], 5):
        raise ValueError("expected hidden [N, H] and score logits [N, 5]")
    if train_hidden.shape[0] == 0:
        raise ValueError("no training samples")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    human = np.asarray(validation_human, dtype=np.float64)
    if validation_hidden.shape[0] != human.shape[0]:
        raise ValueError("validation hidden states and human scores differ in length")
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    started = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _train(
                train_hidden=train_hidden.to(device, torch.float32).contiguous(),
                targets=torch.softmax(train_score_logits.to(device).float() / temperature, dim=-1),
                validation_hidden=validation_hidden.to(device, torch.float32).contiguous(),
                human=human,
                temperature=temperature,
                learning_rate=learning_rate,
                weight_decay=weight_decay,
                batch_size=batch_size,
                epochs=epochs,
                patience=patience,
                dropout=dropout,
                seed=seed,
                early_stopping=early_stopping,
                on_epoch=on_epoch,
                started=started,
                bf16=precision == "bf16",
            )
    finally:
        torch.set_num_threads(previous_threads)


def _train(
    *,
    train_hidden: torch.Tensor,
    targets: torch.Tensor,
    validation_hidden: torch.Tensor,
    human: np.ndarray,
    temperature: float,
    learning_rate: float,
    weight_decay: float,
    batch_size: int,
    epochs: int,
    patience: int,
    dropout: float,
    seed: int,
    early_stopping: bool,
    on_epoch: EpochCallback | None,
    started: float,
    bf16: bool,
) -> Phase1Result:
    count, hidden_size = train_hidden.shape
    device = train_hidden.device
    head = build_head(hidden_size, dropout=dropout, seed=seed).to(device)
    head.train()
    # The fused kernel is several times faster than the per-tensor loop for a 2.6M-parameter head.
    optimizer = torch.optim.Adam(
        head.parameters(),
        lr=learning_rate,
        weight_decay=weight_decay,
        fused=device.type in ("cpu", "cuda"),
    )
    generator = torch.Generator().manual_seed(seed)
    square_temperature = temperature**2
    batch_inputs = torch.empty(batch_size, hidden_size, device=device)
    batch_targets = torch.empty(batch_size, targets.shape[1], device=device)

    best_tau = -math.inf
    best_state = copy.deepcopy(head.state_dict())
    best_epoch = 0
    since_best = 0
    history: list[dict[str, float]] = []
    stopped_early = False
    epoch = 0
    for epoch in range(1, epochs + 1):
        order = torch.randperm(count, generator=generator).to(device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for start in range(0, count, batch_size):
            index = order[start : start + batch_size]
            size = index.shape[0]
            inputs = torch.index_select(train_hidden, 0, index, out=batch_inputs[:size])
            wanted = torch.index_select(targets, 0, index, out=batch_targets[:size])
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = head(inputs)
            student = torch.softmax(logits.float() / temperature, dim=-1)
            loss = emd_1d(student, wanted).mean() * square_temperature
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach().double() * size
        train_loss = float(loss_sum) / count
        tau = kendall_tau_b(predict_scores(head, validation_hidden), human)
        history.append({"epoch": epoch, "loss": train_loss, "validation_tau": tau})
        if not math.isnan(tau) and tau > best_tau:
            best_tau, best_epoch, since_best = tau, epoch, 0
            best_state = copy.deepcopy(head.state_dict())
        else:
            since_best += 1
        if on_epoch is not None:
            on_epoch(epoch, train_loss, tau)
        if early_stopping and since_best >= patience:
            stopped_early = epoch < epochs
            break
    head.load_state_dict(best_state)
    head = head.cpu().eval()
    return Phase1Result(
        head=head,
        best_epoch=best_epoch,
        best_tau=best_tau if best_epoch else float("nan"),
        epochs_run=epoch,
        stopped_early=stopped_early,
        history=history,
        seconds=time.perf_counter() - started,
    )
