"""Benchmark: one Phase 1 training step of the scoring head (batch 64, hidden 2048) on CPU, in
variants, to see where a step's time goes and what changes it.

    python bench/phase1_step_variants.py --threads 16 --variant fp32
    OMP_WAIT_POLICY=ACTIVE python bench/phase1_step_variants.py --threads 16 --variant bf16+inbwd

Variants (joined with "+"): `fp32` or `bf16` (the forward under bf16 autocast, as
`train_head(precision="bf16")`); `inbwd` (Adam stepped per parameter from a post-accumulate-grad
hook, while the gradient is still in cache, instead of one fused step after backward);
`keepgrad` (zero_grad(set_to_none=False): gradient buffers reused, not reallocated). Prints one
JSON object per run: forward, backward and Adam milliseconds per step (backward includes Adam
with `inbwd`), averaged over `--steps` after 20 warm-up steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from training_bridge.rigel.head import build_head
from training_bridge.rigel.losses import emd_1d

HIDDEN, BATCH, POOL = 2048, 64, 30000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    parts = set(args.variant.split("+"))
    unknown = parts - {"fp32", "bf16", "inbwd", "keepgrad"}
    if unknown or len(parts & {"fp32", "bf16"}) != 1:
        parser.error(f"bad variant {args.variant!r}")
    torch.set_num_threads(args.threads)
    pool = torch.randn(POOL, HIDDEN)
    targets = torch.softmax(torch.randn(POOL, 5), -1)
    head = build_head(HIDDEN, seed=0).train()
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
    per_step = {
        "forward_ms": forward,
        "backward_ms": backward,
        "adam_ms": adam,
        "step_ms": forward + backward + adam,
    }
    report = {
        "threads": args.threads,
        "variant": args.variant,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        **{name: round(1e3 * seconds / args.steps, 3) for name, seconds in per_step.items()},
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
    }
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
