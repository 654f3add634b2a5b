"""Issue 17, point 2: scoring one candidate per clip at the limit of one GPU.

The workload of `gpu_rigel.py`'s engine section (Qwen3-VL-2B dimensions, random weights; 8 frames at 448 px,
9 references drawn per sample, so nothing is shared; 4.13 TFLOP per sample). The engine runs with
compiled decoder layers and the fused element-wise ops (the pipeline's compiled engine) and each
route on top of it, one engine after the other in one process:

- ``bf16``: the default (the baseline);
- ``fp8``: `ScoringEngine(fp8=True)` (FP8 linears in the language model and the vision tower);
- ``bf16_graphs`` / ``fp8_graphs``: the same with `cuda_graphs=True` (each decoder layer replayed
  as a CUDA graph);
- ``..._cv`` (e.g. ``bf16_cv``, ``fp8_cv``): the same with `compile_vision=True` (each vision block
  one compiled graph, so the tower's element-wise work and FP8 scaling are fused).

``--keyframe-clips DIR``: the same clips made with keyframes also at the 8 sampled frames
(`make_vatex_clips.py --keyframes-at-samples 8`); their decoding cost, CPU pipeline and end to end
are measured beside the plain clips'.

For each route: the first forward (compile), the GPU alone on prepared batches (``--reps``
timings of the same batches; median, min, max), a kernel profile of one batch, and end to end
from the MP4 files (``--samples``) with the scores kept. FP8's scores are compared with bf16's on
the same samples (Kendall's tau, largest normalised-score difference). Decoding: the CPU cost of
one clip with PyAV in software and with NVDEC (``av_cuda``), the CPU pipeline's rate with each, and
end to end with the fastest GPU route and each decoder (``--e2e-runs`` runs each). Every figure is
written as it comes to one raw file (`bench/provenance.py`; ``LEPUS_BENCH_RESULTS`` names the
folder).

    python3 bench/gpu/scoring_limits.py --clips /tmp/clips
    python3 bench/gpu/scoring_limits.py --clips /tmp/clips --smoke   # tiny model on the CPU
    python3 bench/gpu/scoring_limits.py --clips /tmp/clips --n-clips 128 --nvdec-probe 1,4,8,16

``--nvdec-probe THREADS``: NVDEC through PyNvVideoCodec instead (see `nvdec_probe`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import gpu_rigel as g
from provenance import raw_record, write_raw

from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.engine import ScoringEngine
from training_bridge.rigel.engine.fp8 import (
    FP8_DTYPE,
    PARTS,
    float8_linear_count,
    restore_linears,
)
from training_bridge.rigel.video import DECODER_ENV, decode_video, sample_indices

H100_FP8_DENSE_PEAK = 1979e12  # FLOP/s, H100 SXM datasheet, dense
NOTES = "issue 17 point 2: scoring routes on one GPU"


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


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ceilings(device: torch.device) -> dict[str, float]:
    """8192^3 matrix products: bf16 (torch.matmul) and FP8 e4m3 (torch._scaled_mm, rowwise)."""
    n, reps = 8192, 20
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    a8, b8 = a.to(FP8_DTYPE), b.to(FP8_DTYPE)
    sa = torch.ones(n, 1, device=device)
    sb = torch.ones(1, n, device=device)
    out = {}
    for name, fn in (
        ("bf16", lambda: a @ b),
        ("fp8_rowwise", lambda: torch._scaled_mm(a8, b8.T, sa, sb, out_dtype=torch.bfloat16)),
    ):
        for _ in range(3):
            fn()
        g.sync(device)
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        g.sync(device)
        out[f"matmul_8192_{name}_tflops"] = 2 * n**3 * reps / (time.perf_counter() - start) / 1e12
    return out


def gpu_times(
    engine: ScoringEngine, prepared: list, device: torch.device, reps: int
) -> list[float]:
    """Seconds per sample of each pass over the prepared batches (after one warm-up pass)."""
    for batch in prepared:
        engine.forward_batch(batch)
    g.sync(device)
    samples = sum(len(b.indices) for b in prepared)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for batch in prepared:
            engine.forward_batch(batch)
        g.sync(device)
        times.append((time.perf_counter() - start) / samples)
    return times


def decode_cost(clips: list[Path], decoder: str, rounds: int = 2) -> dict[str, Any]:
    """CPU and wall time of decoding one clip (8 frames) in this process, per clip."""
    try:
        decode_video(clips[0], 8, backend=decoder)  # first open (a CUDA context for NVDEC)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    count = 0
    for _ in range(rounds):
        for clip in clips:
            decode_video(clip, 8, backend=decoder)
            count += 1
    return {
        "clips": count,
        "cpu_ms_per_clip": 1000 * (time.process_time() - cpu0) / count,
        "wall_ms_per_clip": 1000 * (time.perf_counter() - wall0) / count,
    }


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic)


NVDEC_FRAMES = 8


def _decoder(nvc: Any, path: Path) -> Any:
    return nvc.SimpleDecoder(
        str(path), gpu_id=0, use_device_memory=True, output_color_type=nvc.OutputColorType.RGB
    )


def decode_clip(nvc: Any, decoder: Any, path: Path) -> tuple[Any, torch.Tensor]:
    """(the decoder, reconfigured or new; the clip's sampled frames (T, H, W, 3) uint8 on the GPU)."""
    if decoder is None:
        decoder = _decoder(nvc, path)
    else:
        decoder.reconfigure_decoder(str(path))
    indices = sample_indices(len(decoder), NVDEC_FRAMES).tolist()
    frames = decoder.get_batch_frames_by_index(indices)
    return decoder, torch.stack([torch.from_dlpack(frame) for frame in frames])


def rate(nvc: Any, clips: list[Path], threads: int, rounds: int) -> dict[str, Any]:
    work = [clip for _ in range(rounds) for clip in clips]
    shares = [work[k::threads] for k in range(threads)]
    errors: list[str] = []
    shapes: set[tuple[int, ...]] = set()

    def run(share: list[Path]) -> None:
        decoder = None
        try:
            for path in share:
                decoder, frames = decode_clip(nvc, decoder, path)
                shapes.add(tuple(frames.shape))
        except Exception:
            errors.append(traceback.format_exc()[-1500:])

    workers = [threading.Thread(target=run, args=(share,)) for share in shares]
    torch.cuda.synchronize()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {
        "threads": threads,
        "clips": len(work),
        "clips_per_second": len(work) / wall,
        "wall_ms_per_clip": 1000 * wall / len(work),
        "cpu_ms_per_clip": 1000 * cpu / len(work),
        "frame_shapes": sorted(shapes),
        "errors": errors[:2],
    }


def nvdec_probe(args: argparse.Namespace) -> None:
    """`--nvdec-probe THREADS`: can NVDEC take decoding off the CPU, with the frames left on the
    GPU? NVIDIA's PyNvVideoCodec (``SimpleDecoder``, the decoded RGB frames handed to torch through
    DLPack) decodes the 8 frames per clip the engine samples, one decoder per thread reused across
    clips: clips per second and CPU ms per clip per thread count, and the pixels against PyAV's
    software decode of the same frames (the colour conversion differs: not expected equal).
    FFmpeg's CUDA hwaccel through PyAV (the ``av_cuda`` decoder) copies every surface back to host
    memory and saves no CPU. Needs the ``PyNvVideoCodec`` wheel; one raw file, `nvdec_probe`."""
    name = "nvdec_probe" if args.name == "scoring_limits" else args.name
    clips = sorted(Path(args.clips).glob("*.mp4"))[: args.n_clips]
    out: dict[str, Any] = {"args": vars(args), "clips": len(clips)}
    out["code_revision"] = os.environ.get("LEPUS_CODE_REVISION")
    try:
        import PyNvVideoCodec as nvc

        out["pynvvideocodec"] = getattr(nvc, "__version__", "unknown")
        torch.zeros(1, device="cuda")
        decoder, _ = decode_clip(nvc, None, clips[0])  # the first session (NVDEC warm-up)
        diffs = []
        for path in clips[: args.nvdec_compare]:
            decoder, frames = decode_clip(nvc, decoder, path)
            reference = decode_video(path, NVDEC_FRAMES, backend="av").frames
            got = frames.cpu().numpy().astype(np.int16)
            diffs.append(np.abs(got - reference.astype(np.int16)))
        stacked = np.stack(diffs)
        out["against_pyav"] = {
            "clips": len(diffs),
            "mean_abs_difference": float(stacked.mean()),
            "max_abs_difference": int(stacked.max()),
            "share_of_values_equal": float((stacked == 0).mean()),
        }
        print("against PyAV", json.dumps(out["against_pyav"]), flush=True)
        out["rates"] = []
        for threads in [int(t) for t in args.nvdec_probe.split(",")]:
            result = rate(nvc, clips, threads, args.nvdec_rounds)
            out["rates"].append(result)
            print("nvdec", json.dumps(result), flush=True)
    except Exception:
        out["error"] = traceback.format_exc()[-3000:]
        print(out["error"], flush=True)
    cpu0 = time.process_time()
    for path in clips[:24]:
        decode_video(path, NVDEC_FRAMES, backend="av")
    out["pyav_cpu_ms_per_clip"] = 1000 * (time.process_time() - cpu0) / min(24, len(clips))
    print("pyav cpu ms/clip", out["pyav_cpu_ms_per_clip"], flush=True)
    print("raw", write_raw(name, out, notes="issue 17 point 2: NVDEC through PyNvVideoCodec"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", required=True)
    parser.add_argument("--n-clips", type=int, default=256)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--cpu-samples", type=int, default=768)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--routes",
        default="bf16,fp8,fp8_lm,bf16_graphs,fp8_graphs",
        help="bf16, fp8 (language model and vision tower), fp8_lm (language model only); "
        "_graphs: with CUDA graphs; _cv: vision blocks compiled",
    )
    parser.add_argument("--keyframe-clips", default="", help="clips keyframed at the samples")
    parser.add_argument("--decoders", default="av,av_cuda")
    parser.add_argument("--e2e-runs", type=int, default=3, help="0: no CPU/end-to-end stage")
    parser.add_argument("--name", default="scoring_limits")
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU (a dry run)")
    parser.add_argument(
        "--nvdec-probe", metavar="THREADS", help="the NVDEC probe instead (e.g. 1,4,8,16)"
    )
    parser.add_argument("--nvdec-rounds", type=int, default=2)
    parser.add_argument("--nvdec-compare", type=int, default=16, help="clips compared with PyAV")
    args = parser.parse_args()
    if args.nvdec_probe:
        nvdec_probe(args)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    device = torch.device("cpu" if args.smoke else "cuda")
    torch._dynamo.config.recompile_limit = 64
    out: dict[str, Any] = {
        "args": vars(args),
        # the captions and the tokenizer's corpus, with their checksum (stops when missing)
        "inputs": g.input_files(),
        # the code that ran, where it differs from the checkout provenance records
        "code_revision": os.environ.get("LEPUS_CODE_REVISION"),
    }
    clips = g.make_clips(Path(args.clips), args.n_clips, 448, 5.0, 24)
    # Decoding first, before this process makes its CUDA context: FFmpeg's NVDEC decoder shares
    # the device's primary context and refuses one that torch has already made with other flags
    # (the engine's decoding workers never touch CUDA through torch).
    out["decode_one_clip"] = {d: decode_cost(clips[:24], d) for d in args.decoders.split(",")}
    keyframe_clips = sorted(Path(args.keyframe_clips).glob("*.mp4")) if args.keyframe_clips else []
    if keyframe_clips:
        out["decode_one_clip"]["av@keyframes"] = decode_cost(keyframe_clips[:24], "av")
    g.log("decode", json.dumps(out["decode_one_clip"]))
    out["env"] = g.section_env(device)
    if device.type == "cuda":
        out["ceilings"] = ceilings(device)
    out_dir = Path(os.environ.get("LEPUS_BENCH_RESULTS", "bench/results"))
    raw = out_dir / f"{args.name}_partial.json"
    out_dir.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # the figures so far with their provenance, in case the call is cut off
        record = raw_record(args.name, out, notes=NOTES + " (partial: the run had not finished)")
        raw.write_text(json.dumps(record, indent=1, sort_keys=True, default=str))

    def attempt(key: str, fn: Any) -> Any:
        try:
            return fn()
        except Exception:
            out.setdefault("errors", {})[key] = traceback.format_exc()[-3000:]
            g.log("error", key, out["errors"][key])
            save()
            return None

    backbone = load_backbone("tiny" if args.smoke else "qwen3-vl-2b-random", device=device, seed=0)
    head = g.ScoreHead(backbone.hidden_size).to(device)
    examples = g.make_examples(clips, max(args.samples, args.cpu_samples), 9)
    # the same samples (references, candidates, clip numbers) on the keyframed clips
    keyframe_examples = (
        g.make_examples(keyframe_clips[: len(clips)], max(args.samples, args.cpu_samples), 9)
        if keyframe_clips
        else []
    )

    def engine_for(route: str) -> ScoringEngine:
        return ScoringEngine(
            backbone, head, batch_size=args.batch, num_workers=args.workers, loader_batch=8,
            prefetch_factor=4, compile_layers=True, fuse_elementwise=True,
            fp8=route.startswith("fp8"), cuda_graphs="_graphs" in route,
            fp8_parts=("language",) if route.startswith("fp8_lm") else PARTS,
            compile_vision=route.endswith("_cv"),
        )  # fmt: skip

    save()
    os.environ[DECODER_ENV] = "av"
    base = engine_for("bf16")
    prepared = list(base.device_batches(examples[: 2 * args.batch]))
    tokens = float(sum(float(b.lengths.float().mean()) for b in prepared) / len(prepared))
    patches = float(sum(float(b.grids.prod(-1).float().mean()) for b in prepared) / len(prepared))
    chunk = float(prepared[0].grids[0, 1] * prepared[0].grids[0, 2])
    flops = g.flops_summary(backbone.model.config, tokens, patches, chunk)
    out["tokens_per_sample"], out["flops_per_sample"] = tokens, flops
    base.close()
    fp8_peak = H100_FP8_DENSE_PEAK

    def fractions(ms: float) -> dict[str, float]:
        achieved = flops["total"] / (ms / 1000)
        return {
            "tflops_per_s": achieved / 1e12,
            "fraction_of_bf16_peak": achieved / g.H100_BF16_DENSE_PEAK,
            "fraction_of_fp8_peak": achieved / fp8_peak,
        }

    out["routes"] = {}
    scores: dict[str, np.ndarray] = {}
    hidden: dict[str, np.ndarray] = {}
    for route in args.routes.split(","):
        report: dict[str, Any] = {}
        out["routes"][route] = report
        torch._dynamo.reset()
        engine = engine_for(route)
        report["fp8_linears"] = float8_linear_count(backbone.model)

        def first(engine: ScoringEngine = engine) -> float:
            started = time.perf_counter()
            engine.forward_batch(prepared[0])
            g.sync(device)
            return time.perf_counter() - started

        report["first_forward_seconds"] = attempt(f"{route}.first", first)
        if report["first_forward_seconds"] is None:
            engine.close()
            continue
        times = attempt(f"{route}.gpu", lambda e=engine: gpu_times(e, prepared, device, args.reps))
        if times:
            ms = [1000 * t for t in times]
            report["gpu_only_ms_per_sample"] = spread(ms)
            report["gpu_only_runs_ms"] = ms
            report["gpu_only_rate"] = fractions(statistics.median(ms))
            g.log("gpu", route, json.dumps(report["gpu_only_ms_per_sample"]))
        if device.type == "cuda":
            report["kernels"] = attempt(
                f"{route}.kernels", lambda e=engine: kernel_table(e, prepared[:1])
            )
        save()

        def e2e(engine: ScoringEngine = engine, route: str = route) -> dict[str, Any]:
            rep, result = _e2e(engine, examples, args, device, flops)
            scores[route], hidden[route] = result.scores, result.hidden
            return rep

        report["end_to_end_av"] = attempt(f"{route}.e2e", e2e)
        g.log("e2e", route, json.dumps(report["end_to_end_av"]))
        if route != "bf16" and "bf16" in scores and route in scores:
            a, b = scores["bf16"], scores[route]
            report["against_bf16"] = {
                "samples": len(a),
                "kendall_tau": kendall_tau(a, b),
                "max_abs_normalised_score_difference": float(np.abs(a - b).max()),
                "mean_abs_normalised_score_difference": float(np.abs(a - b).mean()),
                "bf16_score_std": float(a.std()),
                # the final hidden states at the answer position, ||route - bf16|| / ||bf16||
                "hidden_relative_difference": float(
                    np.linalg.norm(hidden[route] - hidden["bf16"]) / np.linalg.norm(hidden["bf16"])
                ),
            }
            g.log("against bf16", route, json.dumps(report["against_bf16"]))
        save()
        engine.close()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    assert float8_linear_count(backbone.model) == 0 or restore_linears(backbone.model)

    # The CPU pipeline alone and end to end with each decoder, on the fastest GPU route.
    gpu_best = min(
        (r for r in out["routes"] if "gpu_only_ms_per_sample" in out["routes"][r]),
        key=lambda r: out["routes"][r]["gpu_only_ms_per_sample"]["median"],
        default="bf16",
    )
    out["best_gpu_route"] = gpu_best
    out["cpu_pipeline"] = {}
    out["end_to_end"] = {}
    inputs = [(d, d, examples) for d in args.decoders.split(",")]  # (label, decoder, samples)
    if keyframe_examples:
        inputs.insert(0, ("av@keyframes", "av", keyframe_examples))
    if args.e2e_runs == 0:  # the routes only (a later call measures end to end)
        inputs = []
    for label, decoder, items in inputs:
        os.environ[DECODER_ENV] = decoder
        engine = engine_for(gpu_best)  # compiled again from dynamo's cache
        # NVDEC in the workers needs its own CUDA context: workers that are not forked from this
        # process (CUDA does not survive fork).
        engine.mp_context = "forkserver" if decoder == "av_cuda" else "fork"

        def cpu_rate(engine: ScoringEngine = engine, examples: list = items) -> dict[str, Any]:
            sum(len(b.indices) for b in engine.prepared_batches(examples[: args.batch]))
            start = time.perf_counter()
            count = sum(
                len(b.indices) for b in engine.prepared_batches(examples[: args.cpu_samples])
            )
            seconds = time.perf_counter() - start
            return {"samples": count, "ms_per_sample": 1000 * seconds / count}

        out["cpu_pipeline"][label] = attempt(f"cpu.{label}", cpu_rate)
        g.log("cpu", label, json.dumps(out["cpu_pipeline"][label]))
        save()
        if out["cpu_pipeline"][label] is None:
            engine.close()
            continue
        engine.forward_batch(prepared[0])
        runs = []
        for k in range(args.e2e_runs):
            rep = attempt(
                f"e2e.{label}",
                lambda e=engine, k=k, x=items: _e2e(e, x, args, device, flops, warm=k == 0)[0],
            )
            if rep is None:
                break
            runs.append(rep)
            g.log("e2e", gpu_best, label, json.dumps(rep))
            save()
        if runs:
            ms = [r["ms_per_sample"] for r in runs]
            out["end_to_end"][label] = {
                "route": gpu_best,
                "ms_per_sample": spread(ms),
                "after_first_batch_ms_per_sample": spread(
                    [r.get("after_first_batch_ms_per_sample") or r["ms_per_sample"] for r in runs]
                ),
                "rate_at_median": fractions(statistics.median(ms)),
                "runs": runs,
            }
        save()
        engine.close()
    fused.restore()
    path = write_raw(args.name, out, notes=NOTES)
    g.log("raw", path)
    raw.unlink(missing_ok=True)


def _e2e(
    engine: ScoringEngine,
    examples: list,
    args: Any,
    device: torch.device,
    flops: dict,
    warm: bool = True,
) -> tuple[dict[str, Any], Any]:
    """One end-to-end run of ``--samples`` from the MP4 files (after a warm-up batch when
    ``warm``): its figures and the engine's output. Each run starts its own worker processes, so
    the figures include their start-up; ``after_first_batch_ms_per_sample`` leaves it out."""
    if warm:
        engine.run(examples[: args.batch])
        g.sync(device)
    started = time.perf_counter()
    result = engine.run(examples[: args.samples])
    g.sync(device)
    seconds = time.perf_counter() - started
    rep = g.rate_report(args.samples, seconds, flops["total"])
    rep.update(g.steady_state(result.stats, args.samples, 1))
    assert result.scores is not None
    rep["finite"] = bool(np.isfinite(result.scores).all())
    return rep, result


if __name__ == "__main__":
    main()
