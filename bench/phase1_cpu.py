"""Benchmark: Rigel Phase 1 (scoring-head distillation) on cached teacher tensors, on CPU.

    python bench/phase1_cpu.py --samples 30000 --validation 3000 --hidden 2048 --epochs 50 \
        --runs 3 --json

Synthetic cached tensors stand in for a teacher pass: hidden states with the scale of a final
RMS-normed layer and score logits that depend on them linearly, so the head has something to learn.
Early stopping is off so exactly `--epochs` epochs run (the target is 50 epochs on 30,000 samples
in under 60 s). `--runs` trainings run one after the other; the report holds each and the median,
min and max of every figure, is printed as one JSON object and written as a raw file under
bench/results/ (bench/provenance.py).

One training step in variants, to see where a step's time goes and what changes it (batch 64,
hidden 2048; `--threads`, `--steps`, `--profile`):

    python bench/phase1_cpu.py --threads 16 --step-variant fp32
    OMP_WAIT_POLICY=ACTIVE python bench/phase1_cpu.py --threads 16 --step-variant bf16+inbwd

Variants (joined with "+"): `fp32` or `bf16` (the forward under bf16 autocast, as
`train_head(precision="bf16")`); `inbwd` (Adam stepped per parameter from a post-accumulate-grad
hook, while the gradient is still in cache, instead of one fused step after backward);
`keepgrad` (zero_grad(set_to_none=False): gradient buffers reused, not reallocated); `written`
(the step `train_head` runs: `phase1.HeadStep`, forward and backward written out into reused
buffers, NumPy dropout masks, fused Adam; with `bf16` the float32 matrix products run in oneDNN's
bf16 mode, as `train_head(precision="bf16")`). Prints one JSON object per run: forward, backward
and Adam milliseconds per step (backward includes Adam with `inbwd`; `written` reports the whole
step as `step_ms`), averaged over `--steps` after 20 warm-up steps; `--profile` adds the top
operators by self CPU time. The same object is written as a `phase1_step_variants` raw file; the
step variants are a profile, not a headline: repeat a command for more runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from provenance import summarise_runs, write_raw

from training_bridge.rigel.head import build_head, count_parameters
from training_bridge.rigel.phase1 import (
    PRECISIONS,
    HeadStep,
    bf16_cpu_products,
    bf16_matmul_hardware,
    train_head,
)
from training_bridge.rigel.scoring import normalised_score


def emd_1d(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The 1-D EMD of the step variants' loss (the formula of tests/rigel/oracles.py; the product
    trains with HeadStep's written-out gradient instead)."""
    return (torch.cumsum(p, dim=-1) - torch.cumsum(q, dim=-1)).abs().sum(dim=-1)


def synthetic_cache(samples: int, hidden: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    states = torch.randn(samples, hidden, generator=generator)
    direction = torch.randn(hidden, 5, generator=torch.Generator().manual_seed(1234)) / hidden**0.5
    logits = states @ direction * 3.0
    return states, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=30000)
    parser.add_argument("--validation", type=int, default=3000)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--device", default="cpu", help="cpu (the target) or cuda, for comparison")
    parser.add_argument(
        "--precision", default="fp32", choices=PRECISIONS, help="the head's matrix products"
    )
    parser.add_argument("--runs", type=int, default=3, help="trainings, one after the other")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--step-variant", help="time one training step in this variant instead (see above)"
    )
    parser.add_argument("--steps", type=int, default=200, help="timed steps of --step-variant")
    parser.add_argument("--profile", action="store_true", help="--step-variant written: top ops")
    args = parser.parse_args()
    if args.step_variant:
        parts = set(args.step_variant.split("+"))
        unknown = parts - {"fp32", "bf16", "inbwd", "keepgrad", "written"}
        if unknown or len(parts & {"fp32", "bf16"}) != 1:
            parser.error(f"bad variant {args.step_variant!r}")
        if "written" in parts and parts & {"inbwd", "keepgrad"}:
            parser.error("written takes no other option")
        step_variant(args, parts)
        return
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    train_hidden, train_logits = synthetic_cache(args.samples, args.hidden, seed=1)
    validation_hidden, validation_logits = synthetic_cache(args.validation, args.hidden, seed=2)
    # "Human" scores: the teacher's normalised score plus noise.
    human = normalised_score(validation_logits)
    human = (human + 0.05 * torch.randn(args.validation)).clamp(0, 1).numpy()

    runs = [
        one_training(args, train_hidden, train_logits, validation_hidden, human)
        for _run in range(args.runs)
    ]
    summary = summarise_runs(runs)
    report = {
        "settings": {
            key: getattr(args, key)
            for key in ("samples", "validation", "hidden", "epochs", "batch_size", "device")
        }
        | {"precision": args.precision, "runs": args.runs},
        "summary": summary,
        # The target (50 epochs of 30,000 samples on the CPU in under 60 s) on the median run.
        "median_meets_target": args.device == "cpu"
        and args.samples >= 30000
        and all(int(run["epochs"]) >= 50 for run in runs)
        and summary["seconds"]["median"] < 60,
        "runs": runs,
    }
    report["raw_file"] = str(write_raw("phase1_cpu", report))
    print(json.dumps(report, sort_keys=True) if args.json else json.dumps(report, indent=2))


def one_training(
    args: argparse.Namespace,
    train_hidden: torch.Tensor,
    train_logits: torch.Tensor,
    validation_hidden: torch.Tensor,
    human: object,
) -> dict[str, object]:
    started = time.perf_counter()
    result = train_head(
        train_hidden=train_hidden,
        train_score_logits=train_logits,
        validation_hidden=validation_hidden,
        validation_human=human,
        temperature=2.0,
        batch_size=args.batch_size,
        epochs=args.epochs,
        early_stopping=False,
        threads=args.threads or None,
        device=args.device,
        precision=args.precision,
    )
    seconds = time.perf_counter() - started
    parameters = count_parameters(build_head(args.hidden))
    # Per sample and step: forward 2P, weight gradients 2P, input gradients of the layers after the
    # first (2 * parameters of layers 2 and 3); validation forward 2P per validation sample.
    first_layer = args.hidden * (args.hidden // 2) + args.hidden // 2
    flops = args.epochs * (
        args.samples * (4 * parameters + 2 * (parameters - first_layer))
        + args.validation * 2 * parameters
    )
    report = {
        "samples": args.samples,
        "validation": args.validation,
        "hidden": args.hidden,
        "epochs": result.epochs_run,
        "batch_size": args.batch_size,
        "head_parameters": parameters,
        "seconds": round(seconds, 2),
        "seconds_per_epoch": round(seconds / max(1, result.epochs_run), 3),
        "samples_per_second": round(args.samples * result.epochs_run / seconds),
        "gflops_total": round(flops / 1e9, 1),
        "achieved_gflops_per_second": round(flops / seconds / 1e9, 1),
        "best_epoch": result.best_epoch,
        "best_validation_tau": round(result.best_tau, 4),
        "device": args.device,
        "precision": args.precision,
        "torch_threads": args.threads or torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "target_seconds": 60,
        "meets_target": args.device == "cpu"
        and seconds < 60
        and args.samples >= 30000
        and result.epochs_run >= 50,
    }
    return report


HIDDEN, BATCH, POOL = 2048, 64, 30000


def step_variant(args: argparse.Namespace, parts: set[str]) -> None:
    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    pool = torch.randn(POOL, HIDDEN)
    targets = torch.softmax(torch.randn(POOL, 5), -1)
    head = build_head(HIDDEN, seed=0).train()
    if "written" in parts:
        written(args, parts, head, pool, targets)
        return
    optimizer = None
    if "inbwd" in parts:
        per_parameter = {
            parameter: torch.optim.Adam([parameter], lr=1e-3, weight_decay=0.01, fused=True)
            for parameter in head.parameters()
        }

        def step_now(parameter: torch.Tensor) -> None:
            per_parameter[parameter].step()
            parameter.grad = None

        for parameter in head.parameters():
            parameter.register_post_accumulate_grad_hook(step_now)
    else:
        optimizer = torch.optim.Adam(head.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    inputs = torch.empty(BATCH, HIDDEN)
    wanted = torch.empty(BATCH, 5)
    forward = backward = adam = 0.0
    for step in range(args.steps + 20):
        index = torch.randint(0, POOL, (BATCH,))
        torch.index_select(pool, 0, index, out=inputs)
        torch.index_select(targets, 0, index, out=wanted)
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled="bf16" in parts):
            logits = head(inputs)
        loss = emd_1d(torch.softmax(logits.float() / 2, -1), wanted).mean() * 4
        forwarded = time.perf_counter()
        if optimizer is not None:
            optimizer.zero_grad(set_to_none="keepgrad" not in parts)
        loss.backward()
        backwarded = time.perf_counter()
        if optimizer is not None:
            optimizer.step()
        finished = time.perf_counter()
        if step >= 20:
            forward += forwarded - started
            backward += backwarded - forwarded
            adam += finished - backwarded
    parts_ms = {"forward_ms": forward, "backward_ms": backward, "adam_ms": adam}
    report_step(args, {**parts_ms, "step_ms": forward + backward + adam})


def report_step(args: argparse.Namespace, per_step: dict[str, float], **extra: object) -> None:
    """Seconds summed over the timed steps -> milliseconds per step, one JSON line."""
    report = {
        "threads": args.threads,
        "variant": args.step_variant,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        **{name: round(1e3 * seconds / args.steps, 3) for name, seconds in per_step.items()},
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        **extra,
    }
    print(json.dumps(report, sort_keys=True))
    write_raw("phase1_step_variants", report)


def written(
    args: argparse.Namespace,
    parts: set[str],
    head: torch.nn.Module,
    pool: torch.Tensor,
    targets: torch.Tensor,
) -> None:
    step = HeadStep(
        head,
        batch_size=BATCH,
        temperature=2.0,
        learning_rate=1e-3,
        weight_decay=0.01,
        dropout=0.1,
        seed=0,
    )
    bf16 = "bf16" in parts
    inputs = torch.empty(BATCH, HIDDEN)
    wanted = torch.empty(BATCH, 5)
    total = torch.zeros((), dtype=torch.float64)

    def one() -> None:
        index = torch.randint(0, POOL, (BATCH,))
        torch.index_select(pool, 0, index, out=inputs)
        torch.index_select(targets, 0, index, out=wanted)
        total.add_(step(inputs, wanted))

    with bf16_cpu_products(bf16):
        # Is oneDNN's bf16 path taken on this CPU? bf16 inputs give a relative error ~1e-3.
        a, b = torch.randn(64, HIDDEN), torch.randn(HIDDEN, 1024)
        reduced = torch.mm(a, b)
        for _ in range(20):
            one()
        started = time.perf_counter()
        for _ in range(args.steps):
            one()
        seconds = time.perf_counter() - started
        top = profile_top(one) if args.profile else None
    exact = a.double() @ b.double()
    report_step(
        args,
        {"step_ms": seconds},  # one written-out step: no separate phases to time
        product_relative_error=float((reduced.double() - exact).norm() / exact.norm()),
        bf16_matmul_hardware=bf16_matmul_hardware(),
        **({"profile": top} if top else {}),
    )


def profile_top(one: object, steps: int = 100) -> list[dict[str, object]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            one()  # type: ignore[operator]
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
    return [
        {
            "op": e.key,
            "self_ms_per_step": round(e.self_cpu_time_total / 1e3 / steps, 3),
            "calls": e.count,
        }
        for e in rows
    ]


if __name__ == "__main__":
    main()
