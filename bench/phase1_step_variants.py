"""Benchmark: one Phase 1 training step of the scoring head (batch 64, hidden 2048) on CPU, in
variants, to see where a step's time goes and what changes it.

    python bench/phase1_step_variants.py --threads 16 --variant fp32
    OMP_WAIT_POLICY=ACTIVE python bench/phase1_step_variants.py --threads 16 --variant bf16+inbwd

Variants (joined with "+"): `fp32` or `bf16` (the forward under bf16 autocast, as
`train_head(precision="bf16")`); `inbwd` (Adam stepped per parameter from a post-accumulate-grad
hook, while the gradient is still in cache, instead of one fused step after backward);
`keepgrad` (zero_grad(set_to_none=False): gradient buffers reused, not reallocated); `written`
(the step `train_head` runs: `phase1.HeadStep`, forward and backward written out into reused
buffers, NumPy dropout masks, fused Adam; with `bf16` the float32 matrix products run in oneDNN's
bf16 mode, as `train_head(precision="bf16")`). Prints one JSON object per run: forward, backward
and Adam milliseconds per step (backward includes Adam with `inbwd`; `written` reports the whole
step as `step_ms`), averaged over `--steps` after 20 warm-up steps; `--profile` adds the top
operators by self CPU time. The same object is written as a raw file under bench/results/
(bench/provenance.py); the step variants are a profile, not a headline: repeat a command for more
runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from provenance import write_raw

from tests.rigel.oracles import emd_1d
from training_bridge.rigel.head import build_head
from training_bridge.rigel.phase1 import HeadStep, bf16_cpu_products, bf16_matmul_hardware

HIDDEN, BATCH, POOL = 2048, 64, 30000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    parts = set(args.variant.split("+"))
    unknown = parts - {"fp32", "bf16", "inbwd", "keepgrad", "written"}
    if unknown or len(parts & {"fp32", "bf16"}) != 1:
        parser.error(f"bad variant {args.variant!r}")
    if "written" in parts and parts & {"inbwd", "keepgrad"}:
        parser.error("written takes no other option")
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
        "variant": args.variant,
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
