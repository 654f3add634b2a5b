"""Benchmark: Rigel Phase 1 (scoring-head distillation) on cached teacher tensors, on CPU.

    python bench/phase1_cpu.py --samples 30000 --validation 3000 --hidden 2048 --epochs 50 \
        --runs 3 --json

Synthetic cached tensors stand in for a teacher pass: hidden states with the scale of a final
RMS-normed layer and score logits that depend on them linearly, so the head has something to learn.
Early stopping is off so exactly `--epochs` epochs run (the target is 50 epochs on 30,000 samples
in under 60 s). `--runs` trainings run one after the other; the report holds each and the median,
min and max of every figure, is printed as one JSON object and written as a raw file under
bench/results/ (bench/provenance.py).
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
from training_bridge.rigel.phase1 import PRECISIONS, train_head
from training_bridge.rigel.scoring import normalised_score


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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
