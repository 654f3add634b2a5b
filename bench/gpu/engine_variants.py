"""Scoring with one candidate per clip on one GPU: where the time goes, and what two switches buy.

The workload of `bench/gpu_rigel.py`'s engine section (Qwen3-VL-2B dimensions, random weights;
8 frames at 448 px, 9 references; every sample its own clip and references, so nothing is shared).
Measured, each in one process on the same GPU:

- the CPU pipeline alone (decode, tokenise, positions; the DataLoader workers) with the PyAV and
  the OpenCV decoders (`LEPUS_VIDEO_DECODER`);
- the GPU alone on prepared batches, eager and with `compile_layers=True`, and a torch.profiler
  table of the eager forward's kernels (top 25 by GPU time);
- end-to-end scoring from the MP4 files with the chosen decoder and compile setting.

    python3 bench/gpu/engine_variants.py --clips ../clips --out $OUT/variants.json

Also writes the raw file under bench/results/ (or `LEPUS_BENCH_RESULTS`) through
bench/provenance.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# imported before anything runs: provenance takes the start load average and time at import
import gpu_rigel as g
from provenance import write_raw

from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.engine import ScoringEngine
from training_bridge.rigel.video import DECODER_ENV


def cpu_rate(engine: ScoringEngine, examples: list, decoder: str) -> float:
    os.environ[DECODER_ENV] = decoder  # forked workers read it
    start = time.perf_counter()
    count = sum(len(b.indices) for b in engine.prepared_batches(examples))
    return count / (time.perf_counter() - start)


def gpu_rate(engine: ScoringEngine, prepared: list, device: torch.device, reps: int) -> float:
    for batch in prepared:  # warm-up (and the compile, when on)
        engine.forward_batch(batch)
    g.sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        for batch in prepared:
            engine.forward_batch(batch)
    g.sync(device)
    return (time.perf_counter() - start) / (reps * sum(len(b.indices) for b in prepared))


def kernel_table(engine: ScoringEngine, prepared: list, rows: int = 25) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for batch in prepared:
            engine.forward_batch(batch)
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(e.self_device_time_total for e in events)
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    samples = sum(len(b.indices) for b in prepared)
    return [
        {
            "kernel": e.key[:110],
            "calls": e.count,
            "ms_per_sample": e.self_device_time_total / 1000 / samples,
            "share": e.self_device_time_total / total,
        }
        for e in events[:rows]
    ] + [{"kernel": "TOTAL", "ms_per_sample": total / 1000 / samples}]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--cpu-samples", type=int, default=384)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--decoders", default="av")
    parser.add_argument("--compile", default="off,on")
    parser.add_argument("--fuse", action="store_true", help="fuse_elementwise=True as well")
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU (a dry run)")
    args = parser.parse_args()
    device = torch.device("cpu" if args.smoke else "cuda")
    out: dict[str, Any] = {"env": g.section_env(device), "args": vars(args)}
    path = Path(args.out)

    def save() -> None:
        path.write_text(json.dumps(out, indent=1))

    clips = g.make_clips(Path(args.clips), 24, 448, 5.0, 24)
    backbone = load_backbone("tiny" if args.smoke else "qwen3-vl-2b-random", device=device, seed=0)
    head = g.ScoreHead(backbone.hidden_size).to(device)
    examples = g.make_examples(clips, max(args.samples, args.cpu_samples), 9)
    engine = ScoringEngine(
        backbone, head, batch_size=args.batch, num_workers=args.workers, loader_batch=8,
        prefetch_factor=4,
    )  # fmt: skip
    decoders = args.decoders.split(",")
    out["cpu_pipeline_samples_per_s"] = {}
    for decoder in decoders:
        cpu_rate(engine, examples[: args.batch], decoder)  # workers warm
        rate = cpu_rate(engine, examples[: args.cpu_samples], decoder)
        out["cpu_pipeline_samples_per_s"][decoder] = rate
        g.log("cpu", decoder, f"{rate:.1f} samples/s", f"{1000 / rate:.2f} ms/sample")
        save()
    best_decoder = max(out["cpu_pipeline_samples_per_s"], key=out["cpu_pipeline_samples_per_s"].get)
    os.environ[DECODER_ENV] = best_decoder
    prepared = list(engine.device_batches(examples[: 2 * args.batch]))
    tokens = float(sum(float(b.lengths.float().mean()) for b in prepared) / len(prepared))
    patches = float(sum(float(b.grids.prod(-1).float().mean()) for b in prepared) / len(prepared))
    chunk = float(prepared[0].grids[0, 1] * prepared[0].grids[0, 2])
    flops = g.flops_summary(backbone.model.config, tokens, patches, chunk)
    out["tokens_per_sample"], out["flops_per_sample"] = tokens, flops
    out["gpu_only"] = {}
    out["end_to_end_scoring"] = {}
    for setting in args.compile.split(","):
        compiled = setting == "on"
        engine = ScoringEngine(
            backbone, head, batch_size=args.batch, num_workers=args.workers, loader_batch=8,
            prefetch_factor=4, compile_layers=compiled, fuse_elementwise=args.fuse,
        )  # fmt: skip
        started = time.perf_counter()
        engine.forward_batch(prepared[0])
        g.sync(device)
        first = time.perf_counter() - started
        seconds = gpu_rate(engine, prepared, device, args.reps)
        report = g.rate_report(1, seconds, flops["total"])
        report["first_forward_seconds"] = first
        out["gpu_only"][setting] = report
        g.log("gpu", setting, json.dumps(report))
        if not compiled and device.type == "cuda":
            out["kernels_eager"] = kernel_table(engine, prepared)
        save()
        engine.run(examples[: args.batch])  # workers and allocator warm
        g.sync(device)
        started = time.perf_counter()
        result = engine.run(examples[: args.samples])
        g.sync(device)
        seconds = time.perf_counter() - started
        report = g.rate_report(args.samples, seconds, flops["total"])
        report.update(g.steady_state(result.stats, args.samples, 1))
        report["decoder"] = best_decoder
        report["finite"] = bool(torch.isfinite(torch.from_numpy(result.hidden)).all())
        out["end_to_end_scoring"][setting] = report
        g.log("e2e", setting, json.dumps(report))
        save()
        if compiled:
            from training_bridge.rigel import fused

            fused.uncompile_decoder_layers(backbone.model.model.language_model)
    save()
    # The provenance record (commit, command, machine, GPU, versions) beside the working file.

    write_raw("engine_variants", out)


if __name__ == "__main__":
    main()
