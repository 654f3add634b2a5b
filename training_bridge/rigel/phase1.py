"""Phase 1: distil the frozen backbone's score judgement into the MLP scoring head (Section 3.1).

Everything here runs on cached tensors (the teacher pass already read every sample once), so an
epoch over tens of thousands of samples is a few seconds of matrix products:

- the whole training set sits in one float32 tensor; a batch is an `index_select` into a reused
  buffer (no DataLoader, no per-sample Python);
- the teacher's temperature softmax is computed once, not per epoch;
- a step is written out (`HeadStep`): forward, the gradient of EMD x T^2 by hand, backward into
  reused buffers, dropout masks from NumPy's PCG64 and torch's fused Adam kernel called directly.
  The same numbers as autograd and `torch.optim.Adam` (tests/rigel/test_phase1_step.py),
  in half the time on a 16-core CPU (2.8 against 3.8 ms a step; 50 epochs x 30,000 samples in 55.5
  against 100.1 s, docs/benchmarks.md);
- validation is one inference-mode pass in large chunks;
- `precision="bf16"` (CPU only) lets oneDNN compute the float32 matrix products from bf16-rounded
  inputs with float32 accumulation where torch hands it the products (`bf16_matmul_hardware`:
  an AMX CPU, not an AMD EPYC with AVX512-BF16); weights, Adam state,
  activations and loss stay float32. Off by default: 2.3 against 2.8 ms a step on the GPU host's
  AMX CPU but the same 55 s over 50 epochs, not worth a less exact default.

Early stopping follows Appendix D: Kendall's tau (tau_b) of the head's score against the human
normalised scores on the validation split after every epoch; stop after `patience` epochs without
improvement and keep the best epoch's weights.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from scipy import stats
from torch import nn

from training_bridge.rigel.config import PHASE1_OBJECTIVES
from training_bridge.rigel.head import ScoringHead, build_head
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


@functools.cache
def bf16_matmul_hardware() -> bool:
    """Whether `precision="bf16"` computes float32 products from bf16 inputs on this machine.

    Having bf16 units is not enough: torch hands the product to oneDNN's bf16 mode only where its
    own checks pass (an AMX CPU did; an AMD EPYC with AVX512-BF16 kept float32 products). So it is
    probed once, on a product of the head's first-layer shape whose inputs lose their last bits in
    bf16: 2048 x (1 + 2^-10) is 2050 in float32 and 2048 from bf16 inputs."""
    a = torch.full((64, 2048), 1 + 2**-10)
    b = torch.ones(2048, 64)
    with bf16_cpu_products(True):
        product = torch.mm(a, b)
    return bool((product == 2048).all())


@contextmanager
def bf16_cpu_products(bf16: bool) -> Iterator[None]:
    """With `bf16`: float32 matrix products on CPU computed by oneDNN from bf16-rounded inputs
    with float32 accumulation where torch does so on this CPU (`bf16_matmul_hardware`; AMX did);
    everything else stays float32."""
    if not bf16:
        yield
        return
    settings = getattr(torch.backends.mkldnn, "matmul", None)
    if settings is not None and hasattr(settings, "fp32_precision"):
        previous = settings.fp32_precision
        settings.fp32_precision = "bf16"
        try:
            yield
        finally:
            settings.fp32_precision = previous
        return
    # torch before the per-backend settings: "medium" lets oneDNN use bf16 for float32 products
    previous_global = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous_global)


class HeadStep:
    """One Phase 1 training step of the head, written out: forward, the EMD x T^2 gradient by
    hand, backward into preallocated gradient buffers, then the fused Adam step.

    The same arithmetic as autograd over `ScoringHead` (`test_the_written_out_step_equals_autograd_and_torch_adam`)
    in a fraction of the operations and with no allocation per step: at batch 64 a step is a few
    milliseconds, and with autograd a good part of that went to allocating and filling fresh
    gradient tensors and to dropout's random numbers (torch's CPU `bernoulli_` draws one Mersenne
    Twister number per element on one core: 1.2 ms of a 15 ms step on 2 cores). Dropout masks come
    from NumPy's PCG64 here: 16 random bits per unit, kept when below round((1 - p) * 65536), so
    the keep probability is exact to 1/65536.
    """

    def __init__(
        self,
        head: ScoringHead,
        *,
        batch_size: int,
        temperature: float,
        learning_rate: float,
        weight_decay: float,
        dropout: float,
        seed: int,
        objective: str = "emd",
    ) -> None:
        if objective not in PHASE1_OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(PHASE1_OBJECTIVES)}")
        self.objective = objective
        # The head's three Linear layers (Sequential indexing is typed as any Module).
        first, second, last = (cast(nn.Linear, head.net[index]) for index in (0, 3, 6))
        self.layers = (first, second, last)
        self.parameters = [p for layer in self.layers for p in (layer.weight, layer.bias)]
        device = first.weight.device
        for parameter in self.parameters:
            parameter.grad = torch.zeros_like(parameter)
        # torch.optim.Adam(fused=True)'s own kernel, called directly: the optimiser's Python
        # around it (grouping by device and dtype, state lookups) cost as much as the kernel.
        self.adam: dict[str, Any] = {
            "lr": learning_rate,
            "beta1": 0.9,
            "beta2": 0.999,
            "weight_decay": weight_decay,
            "eps": 1e-8,
            "amsgrad": False,
            "maximize": False,
        }
        # Set just above, never None: the fused kernel writes into these buffers.
        self.grads = [cast(torch.Tensor, p.grad) for p in self.parameters]
        self.exp_avgs = [torch.zeros_like(p) for p in self.parameters]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in self.parameters]
        self.steps = [torch.zeros((), dtype=torch.float32, device=device) for _ in self.parameters]
        self.temperature = temperature
        self.square_temperature = temperature**2
        self.dropout = dropout
        widths = (first.out_features, second.out_features, last.out_features)
        self.widths = widths

        def buffers(dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
            return [torch.empty(batch_size, width, device=device, dtype=dtype) for width in widths]

        self.pre = buffers()  # h = x W^T + b of each layer
        self.act = buffers()[:2]  # GELU(h), then times the dropout mask, in place
        self.grad_pre = buffers()  # dL/dh
        self.grad_act = buffers()[:2]
        self.mask = buffers()[:2]
        # cumulative sums as one product: (p - q) @ upper = CDF differences; the gradient of the
        # CDF differences goes back through upper^T (sums over k >= j)
        self.upper = torch.triu(torch.ones(widths[2], widths[2], device=device))
        self.keep = 1.0 - dropout
        self.keep_below = round(self.keep * 65536)
        self.rng = np.random.default_rng(seed)
        self.on_cpu = device.type == "cpu"
        self.generator = None if self.on_cpu else torch.Generator(device).manual_seed(seed)

    def _masks(self, size: int) -> None:
        units = self.widths[0] + self.widths[1]
        if self.on_cpu:
            bits = np.frombuffer(self.rng.bytes(2 * size * units), dtype=np.uint16)
            kept = torch.from_numpy((bits < self.keep_below).reshape(size, units))
        else:
            kept = torch.rand(size, units, device=self.mask[0].device, generator=self.generator)
            kept = kept < self.keep
        scale = 1.0 / self.keep
        self.mask[0][:size].copy_(kept[:, : self.widths[0]]).mul_(scale)
        self.mask[1][:size].copy_(kept[:, self.widths[0] :]).mul_(scale)

    @torch.no_grad()
    def __call__(self, inputs: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
        """Train on one batch (inputs [B, H], the teacher's softened distribution [B, 5]);
        returns the batch's summed per-sample loss (a 0-d tensor, not synchronised)."""
        size = inputs.shape[0]
        pre = [b[:size] for b in self.pre]
        act = [b[:size] for b in self.act]
        grad_pre = [b[:size] for b in self.grad_pre]
        grad_act = [b[:size] for b in self.grad_act]
        if self.dropout > 0:
            self._masks(size)
        # forward
        x = inputs
        for k, layer in enumerate(self.layers):
            torch.addmm(layer.bias, x, layer.weight.t(), out=pre[k])
            if k == 2:
                break
            # The op takes out=; torch's stubs for torch._C._nn.gelu do not say so.
            torch._C._nn.gelu(pre[k], out=act[k])  # type: ignore[call-arg]
            if self.dropout > 0:
                act[k].mul_(self.mask[k][:size])
            x = act[k]
        logits = pre[2]
        if self.objective == "kl":
            # KL(teacher || student) at T (Table 5's (i)); dL/dlogits of
            # mean_b(T^2 * KL) is T * (student - teacher) / B
            log_student = torch.log_softmax(logits / self.temperature, dim=-1)
            student = log_student.exp()
            loss = torch.special.xlogy(wanted, wanted).sum() - (wanted * log_student).sum()
            torch.sub(student, wanted, out=grad_pre[2]).mul_(self.temperature / size)
        else:
            student = torch.softmax(logits / self.temperature, dim=-1)
            cdf_difference = (student - wanted) @ self.upper
            loss = cdf_difference.abs().sum()
            # dL/dlogits of mean_b(T^2 * sum_k |CDF difference|) through the softmax at T
            grad_cdf = torch.sign(cdf_difference).mul_(self.square_temperature / size)
            grad_student = grad_cdf @ self.upper.t()
            inner = (student * grad_student).sum(-1, keepdim=True)
            torch.mul(student, grad_student.sub_(inner), out=grad_pre[2]).div_(self.temperature)
        # backward, weight gradients straight into the .grad buffers
        for k in (2, 1, 0):
            layer = self.layers[k]
            below = inputs if k == 0 else act[k - 1]
            torch.mm(grad_pre[k].t(), below, out=layer.weight.grad)
            torch.sum(grad_pre[k], 0, out=layer.bias.grad)
            if k == 0:
                break
            torch.mm(grad_pre[k], layer.weight, out=grad_act[k - 1])
            if self.dropout > 0:
                grad_act[k - 1].mul_(self.mask[k - 1][:size])
            torch.ops.aten.gelu_backward.grad_input(
                grad_act[k - 1], pre[k - 1], grad_input=grad_pre[k - 1]
            )
        torch._foreach_add_(self.steps, 1)
        torch._fused_adam_(
            self.parameters,
            self.grads,
            self.exp_avgs,
            self.exp_avg_sqs,
            [],
            self.steps,
            **self.adam,
        )
        return loss * self.square_temperature


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
    objective: str = "emd",
) -> Phase1Result:
    """Train a fresh head to match softmax(teacher / T) under EMD x T^2 (or KL x T^2, `objective`
    "kl": the ablation of Table 5); return the best epoch's."""
    if train_hidden.ndim != 2 or train_score_logits.shape != (train_hidden.shape[0], 5):
        raise ValueError("expected hidden [N, H] and score logits [N, 5]")
    if train_hidden.shape[0] == 0:
        raise ValueError("no training samples")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "bf16" and torch.device(device).type != "cpu":
        raise ValueError("precision bf16 is a CPU setting (oneDNN's bf16 products)")
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
                objective=objective,
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
    objective: str = "emd",
) -> Phase1Result:
    count, hidden_size = train_hidden.shape
    device = train_hidden.device
    head = build_head(hidden_size, dropout=dropout, seed=seed).to(device)
    head.train()
    step = HeadStep(
        head,
        batch_size=batch_size,
        temperature=temperature,
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        dropout=dropout,
        seed=seed,
        objective=objective,
    )
    generator = torch.Generator().manual_seed(seed)
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
        with bf16_cpu_products(bf16):
            for start in range(0, count, batch_size):
                index = order[start : start + batch_size]
                size = index.shape[0]
                inputs = torch.index_select(train_hidden, 0, index, out=batch_inputs[:size])
                wanted = torch.index_select(targets, 0, index, out=batch_targets[:size])
                loss_sum += step(inputs, wanted)
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
