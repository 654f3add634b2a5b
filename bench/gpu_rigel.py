"""Rigel on a GPU: throughput of scoring, the teacher pass and Phase 2 (see docs/benchmarks.md,
"## Rigel on GPU").

Workload (the issue's): a model of Qwen3-VL-2B-Instruct's exact dimensions with random weights,
8 frames per clip from 448 px MP4 files, 9 references and one candidate per sample (about 940
tokens, 484 of them video). Sections, each written to ``<out>/<section>.json``:

- ``env``: versions, the card, a large bf16 matmul (the measured ceiling);
- ``hf``: plain transformers forwards on preprocessed inputs (batch 1 and 64, full logits and
  ``logits_to_keep=1``), and the CPU cost of building the inputs per sample on one core;
- ``engine``: end-to-end scoring from MP4 files with ``ScoringEngine`` (decode in worker
  processes, GPU preprocessing, fast vision attention, right padding, last position only), its
  GPU part alone and its CPU part alone; then the teacher pass (no head) the same way;
- ``shared``: scoring several candidates of a clip for one shared prefix (VATEX-EVAL's shape);
- ``phase2_train``: training's own Phase 2 (`train_phase2`) on these clips, its variants and
  compile settings (``--phase2-*``);
- ``fused``: the engine with the fused element-wise ops.

Under ``torchrun --nproc_per_node N`` the engine and Phase 2 run data parallel (Phase 2 with DDP).
(Runs A-C's ``variants`` and ``phase2`` sections were removed in issue 27: superseded by
bench/gpu/scoring_limits.py and ``phase2_train``.)

    python bench/gpu_rigel.py --out results/ [--smoke]          # --smoke: tiny model on CPU
    torchrun --nproc_per_node 2 bench/gpu_rigel.py --out results/ --sections engine,phase2_train
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics

# Like torchrun: one OpenMP thread in this process (the engine's workers do the CPU work).
os.environ.setdefault("OMP_NUM_THREADS", "1")
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# imported before anything runs: provenance takes the start load average and time at import
from provenance import write_raw

from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.distributed import Distributed
from training_bridge.rigel.engine import ScoringEngine
from training_bridge.rigel.engine.batches import PreparedBatch
from training_bridge.rigel.engine.flops import forward_flops
from training_bridge.rigel.inputs import RigelExample, build_batch

H100_BF16_DENSE_PEAK = 989e12  # FLOP/s, H100 SXM datasheet (the H200 has the same chip)


# --------------------------------------------------------------------------------------------
# Setup


def dist_info() -> tuple[int, int, int]:
    return (
        int(os.environ.get("RANK", 0)),
        int(os.environ.get("WORLD_SIZE", 1)),
        int(os.environ.get("LOCAL_RANK", 0)),
    )


def log(*parts: Any) -> None:
    rank, _, _ = dist_info()
    print(f"[rank {rank} {time.strftime('%H:%M:%S')}]", *parts, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


VATEX_EVAL = (
    Path(__file__).resolve().parents[1] / "data" / "vatex_eval" / "vid_cans_score_dict.json"
)
SYNTHETIC_CAPTIONS = False  # set by --synthetic-captions; the raw file says so


def input_files() -> dict[str, Any]:
    """The inputs a figure depends on, with checksums (the raw file records them): the VATEX-EVAL
    captions the examples and the local tokenizer are made from."""
    import hashlib

    if not VATEX_EVAL.exists():
        return {"vatex_eval": None, "synthetic_captions": SYNTHETIC_CAPTIONS}
    data = VATEX_EVAL.read_bytes()
    rows = json.loads(data)
    return {
        "vatex_eval": {
            "path": str(VATEX_EVAL.relative_to(VATEX_EVAL.parents[2])),
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
            "rows": len(rows),
            "candidates": sum(len(row.get("cands", [])) for row in rows.values()),
        },
        "synthetic_captions": SYNTHETIC_CAPTIONS,
    }


def caption_pool() -> list[str]:
    """The VATEX-EVAL candidates; without the file the benchmark stops (it would measure other
    captions and another tokenizer), unless --synthetic-captions asks for stand-ins."""
    if SYNTHETIC_CAPTIONS:
        return [
            f"a person does thing number {i} in a bright room with friends ." for i in range(500)
        ]
    if not VATEX_EVAL.exists():
        raise SystemExit(
            f"missing input: {VATEX_EVAL} (the real captions; copy data/vatex_eval/ with the "
            "code, or pass --synthetic-captions to measure stand-ins, which the raw file records)"
        )
    pool: list[str] = []
    for row in json.loads(VATEX_EVAL.read_text()).values():
        pool.extend(row.get("cands", []))
    return pool


def make_clips(directory: Path, count: int, size: int, seconds: float, fps: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    clips = sorted(directory.glob("*.mp4"))
    if len(clips) >= count:
        return clips[:count]
    for k in range(count):
        path = directory / f"clip_{k:03d}.mp4"
        if path.exists():
            continue
        if shutil.which("ffmpeg"):
            subprocess.run(
                [
                    "ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc2=size={size}x{size}:rate={fps}:duration={seconds}",
                    "-vf", f"noise=alls=6:allf=t,hue=h={k * 15}", "-pix_fmt", "yuv420p",
                    "-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-g", str(2 * fps),
                    "-movflags", "+faststart", str(path),
                ],
                check=True,
            )  # fmt: skip
        else:  # OpenCV's MPEG-4 part 2 writer (no H.264 encoder in the wheels)
            import cv2

            writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (size, size))
            rng = np.random.default_rng(k)
            _, xs = np.mgrid[0:size, 0:size]
            for f in range(int(seconds * fps)):
                base = 127 + 100 * np.sin((xs + 3 * f + 10 * k) / 23.0)[..., None] * np.array(
                    [1, 0.5, -1]
                )
                frame = np.clip(base + rng.normal(0, 6, (size, size, 3)), 0, 255).astype(np.uint8)
                writer.write(frame)
            writer.release()
    return sorted(directory.glob("*.mp4"))[:count]


def make_examples(clips: list[Path], n: int, refs: int, seed: int = 0) -> list[RigelExample]:
    pool = caption_pool()
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(n):
        picks = rng.choice(len(pool), refs + 1, replace=False)
        examples.append(
            RigelExample(
                references=[pool[j] for j in picks[:refs]],
                candidate=pool[picks[-1]],
                video_path=str(clips[i % len(clips)]),
            )
        )
    return examples


class ScoreHead(torch.nn.Module):
    """A stand-in for Phase 1's MLP head: about 2.6M parameters at hidden 2048."""

    def __init__(self, hidden: int):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden // 2),
            torch.nn.GELU(),
            torch.nn.Linear(hidden // 2, hidden // 4),
            torch.nn.GELU(),
            torch.nn.Linear(hidden // 4, 5),
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net(hidden.float())


def flops_summary(config: Any, tokens: float, patches: float, chunk: float) -> dict[str, float]:
    return forward_flops(config, seq_len=tokens, patches=patches, chunk=chunk)


def rate_report(
    samples: int, seconds: float, flops_per_sample: float, world: int = 1
) -> dict[str, float]:
    per_sample = seconds / samples
    achieved = flops_per_sample * samples / seconds
    return {
        "samples": samples,
        "seconds": seconds,
        "samples_per_s": samples / seconds,
        "ms_per_sample": 1000 * per_sample,
        "tflops_per_s": achieved / 1e12,
        "fraction_of_bf16_peak": achieved / (H100_BF16_DENSE_PEAK * world),
    }


# --------------------------------------------------------------------------------------------
# Sections


def section_env(device: torch.device) -> dict[str, Any]:
    import transformers

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_count": os.cpu_count(),
        "device": str(device),
    }
    try:
        import peft

        info["peft"] = peft.__version__
    except ImportError:
        info["peft"] = None
    try:
        import cv2

        info["cv2"] = cv2.__version__
    except ImportError:
        info["cv2"] = None
    info["ffmpeg"] = shutil.which("ffmpeg")
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_memory_gib"] = torch.cuda.get_device_properties(device).total_memory / 2**30
        n = 8192
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        sync(device)
        start = time.perf_counter()
        reps = 20
        for _ in range(reps):
            a @ b
        sync(device)
        info["matmul_8192_bf16_tflops"] = 2 * n**3 * reps / (time.perf_counter() - start) / 1e12
        del a, b
    return info


def _time(fn: Any, device: torch.device, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - start) / reps


def section_hf(
    backbone: Any, examples: list[RigelExample], device: torch.device, args: Any
) -> dict:
    from training_bridge.rigel.video import decode_video

    out: dict[str, Any] = {}
    big = min(args.batch, len(examples))
    # Decode once (not timed here), then time build_batch's CPU work (= the processor's job).
    decoded = []
    for ex in examples[:big]:
        video = decode_video(ex.video_path, backbone.vision.num_frames)
        decoded.append(
            RigelExample(
                references=ex.references,
                candidate=ex.candidate,
                frames=video.frames,
                fps=video.fps,
                frame_indices=list(video.indices),
            )
        )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    build_batch(decoded[:8], backbone, reference_free=False, device="cpu")
    out["build_batch_cpu_ms_per_sample_1_thread"] = 1000 * (time.perf_counter() - start) / 8
    torch.set_num_threads(threads)
    start = time.perf_counter()
    batch1 = build_batch(decoded[:1], backbone, reference_free=False, device=device)
    batch = build_batch(decoded, backbone, reference_free=False, device=device)
    out["tokens_per_sample"] = float(batch["attention_mask"].sum(1).float().mean())
    out["video_tokens_per_sample"] = float((batch["mm_token_type_ids"] == 2).sum(1).float().mean())
    model = backbone.model
    with torch.inference_mode():
        t1 = _time(lambda: model(**batch1), device, 2, args.reps)
        out["plain_batch1_ms_per_sample"] = 1000 * t1
        t1k = _time(lambda: model(**batch1, logits_to_keep=1), device, 1, args.reps)
        out["plain_batch1_keep1_ms_per_sample"] = 1000 * t1k
        try:
            tb = _time(lambda: model(**batch), device, 1, max(1, args.reps // 3))
            out[f"plain_batch{big}_ms_per_sample"] = 1000 * tb / big
        except torch.OutOfMemoryError:
            out[f"plain_batch{big}_ms_per_sample"] = "out of memory"
        gc.collect()
        torch.cuda.empty_cache() if device.type == "cuda" else None
        tk = _time(lambda: model(**batch, logits_to_keep=1), device, 1, max(1, args.reps // 3))
        out[f"plain_batch{big}_keep1_ms_per_sample"] = 1000 * tk / big
    out["batch"] = big
    return out


def section_engine(
    backbone: Any, examples: list[RigelExample], device: torch.device, args: Any, head: Any
) -> dict:
    rank, world, _ = dist_info()
    out: dict[str, Any] = {
        "world_size": world,
        "batch": args.batch,
        "workers": args.workers,
        "loader_batch": args.loader_batch,
        "prefetch": args.prefetch,
        "fuse_elementwise": args.fuse,
    }
    config = backbone.model.config
    mine = examples[rank::world]
    engine = ScoringEngine(
        backbone,
        head,
        batch_size=args.batch,
        num_workers=args.workers,
        prefetch_factor=args.prefetch,
        loader_batch=args.loader_batch,
        fuse_elementwise=args.fuse,
        mp_context=args.mp_context,
    )
    # Warm-up (kernels, allocator) on two batches.
    engine.run(mine[: 2 * args.batch])
    # CPU side alone: the worker pipeline without the GPU.
    start = time.perf_counter()
    count = 0
    for batch in engine.prepared_batches(mine[: args.cpu_samples]):
        count += len(batch.indices)
    out["cpu_pipeline_samples_per_s"] = count / (time.perf_counter() - start)
    # GPU side alone: forward of prepared batches already in memory.
    prepared: list[PreparedBatch] = list(engine.device_batches(mine[: 2 * args.batch]))
    for batch in prepared:
        engine.forward_batch(batch)
    sync(device)
    start = time.perf_counter()
    reps = 3
    for _ in range(reps):
        for batch in prepared:
            engine.forward_batch(batch)
    sync(device)
    gpu_seconds = time.perf_counter() - start
    gpu_samples = reps * sum(len(b.indices) for b in prepared)
    tokens = float(np.mean([float(b.lengths.float().mean()) for b in prepared]))
    patches = float(np.mean([float(b.grids.prod(-1).float().mean()) for b in prepared]))
    chunk = float(prepared[0].grids[0, 1] * prepared[0].grids[0, 2])
    flops = flops_summary(config, tokens, patches, chunk)
    out["tokens_per_sample"] = tokens
    out["video_tokens_per_sample"] = patches / config.vision_config.spatial_merge_size**2
    out["patches_per_sample"] = patches
    out["flops_per_sample"] = flops
    out["gpu_only"] = rate_report(gpu_samples, gpu_seconds, flops["total"])
    del prepared
    # End to end from MP4 files: scoring with the head, then the teacher pass (no head).
    runs = [("scoring", True, args.samples)]
    if args.teacher_samples:
        runs.append(("teacher", False, args.teacher_samples))
    for name, with_head, n in runs:
        engine.head = head if with_head else None
        subset = mine[: n // world] if world > 1 else mine[:n]
        if world > 1:
            torch.distributed.barrier()
        sync(device)
        start = time.perf_counter()
        result = engine.run(subset)
        sync(device)
        seconds = time.perf_counter() - start
        if world > 1:
            t = torch.tensor([seconds, len(subset)], device=device, dtype=torch.float64)
            gathered = [torch.zeros_like(t) for _ in range(world)]
            torch.distributed.all_gather(gathered, t)
            seconds = max(float(g[0]) for g in gathered)
            total = int(sum(float(g[1]) for g in gathered))
        else:
            total = len(subset)
        report = rate_report(total, seconds, flops["total"], world)
        report.update(steady_state(result.stats, total, world))
        report["finite"] = bool(
            np.isfinite(result.hidden).all() and np.isfinite(result.score_logits).all()
        )
        if result.scores is not None:
            report["score_mean"] = float(np.mean(result.scores))
            report["score_std"] = float(np.std(result.scores))
        out[f"end_to_end_{name}"] = report
        log(name, json.dumps(report))
    return out


def steady_state(stats: dict[str, Any], total: int, world: int) -> dict[str, Any]:
    """Start-up (worker processes, first batch) and the rate after the first batch."""
    first = stats.get("first_batch_seconds")
    out: dict[str, Any] = {"first_batch_seconds": first}
    if first is not None and stats["seconds"] > first and stats["batches"] > 1:
        per_batch = total / world / stats["batches"]
        rest = (total / world - per_batch) * world
        out["after_first_batch_ms_per_sample"] = 1000 * (stats["seconds"] - first) / rest
    return out


def make_vatex_examples(clips: list[Path], n_clips: int, refs: int = 9) -> list[RigelExample]:
    """The real data's structure: VATEX-EVAL rows in order, each with its own 9 references and
    its 6 candidates, the row's video being one of the MP4 files (row r -> file r mod count).
    Rows are distinct groups (their references differ), so every row's clip is decoded once."""
    caption_pool()  # stops on a missing file
    rows = list(json.loads(VATEX_EVAL.read_text()).values())[:n_clips]
    examples = []
    for r, row in enumerate(rows):
        references = row["refs"][0] if isinstance(row["refs"][0], list) else row["refs"]
        for candidate in row["cands"]:
            examples.append(
                RigelExample(
                    references=list(references[:refs]),
                    candidate=candidate,
                    video_path=str(clips[r % len(clips)]),
                )
            )
    return examples


def section_shared(
    backbone: Any, clips: list[Path], device: torch.device, args: Any, head: Any
) -> dict:
    """Workload (b): 6 candidates per clip with the same 9 references (VATEX-EVAL's structure),
    through the shared-prefix path: decode, vision tower and prompt prefix once per clip."""
    from training_bridge.rigel.engine.flops import shared_prefix_flops
    from training_bridge.rigel.engine.prefix import plan_groups

    rank, world, _ = dist_info()
    n_clips = max(1, args.shared_samples // 6)
    every = make_vatex_examples(clips, n_clips * world)
    # whole clips per rank
    examples = [e for r in range(rank, n_clips * world, world) for e in every[6 * r : 6 * r + 6]]
    out: dict[str, Any] = {
        "workload": "b: 6 candidates per clip, same 9 references (VATEX-EVAL structure)",
        "world_size": world,
        "batch_candidates": args.shared_batch,
        "workers": args.workers,
        "group_loader_batch": args.group_loader_batch,
        "prefetch": args.prefetch,
        "fuse_elementwise": args.fuse,
    }
    config = backbone.model.config
    engine = ScoringEngine(
        backbone,
        head,
        batch_size=args.shared_batch,
        num_workers=args.workers,
        prefetch_factor=args.prefetch,
        group_loader_batch=args.group_loader_batch,
        fuse_elementwise=args.fuse,
        mp_context=args.mp_context,
    )
    parts = args.shared_parts.split(",")
    batches = 2 if "gpu" in parts else 1
    warm = examples[: 6 * max(2, -(-batches * args.shared_batch // 6))]
    groups = plan_groups(warm, False)
    prepared = list(engine.group_device_batches(warm, groups))
    for gb in prepared:
        engine.forward_groups(gb)
    sync(device)
    # GPU part alone on the prepared batches.
    reps = args.gpu_reps if "gpu" in parts else 0
    start = time.perf_counter()
    for _ in range(reps):
        for gb in prepared:
            engine.forward_groups(gb)
    sync(device)
    gpu_seconds = time.perf_counter() - start
    samples = sum(len(gb.indices) for gb in prepared)
    flops = {k: 0.0 for k in ("lm_linear", "lm_attention", "vision_linear", "vision_attention",
                              "mergers", "total")}  # fmt: skip
    prefix_tokens = suffix_tokens = 0
    for gb in prepared:
        f = shared_prefix_flops(
            config,
            prefix_lengths=gb.prefix.lengths.tolist(),
            suffix_lengths=gb.suffix_lengths.tolist(),
            owner=gb.owner.tolist(),
            patches=float(gb.prefix.grids[0].prod()),
            chunk=float(gb.prefix.grids[0, 1] * gb.prefix.grids[0, 2]),
        )
        for key in flops:
            flops[key] += f[key]
        prefix_tokens += int(gb.prefix.lengths.sum())
        suffix_tokens += int(gb.suffix_lengths.sum())
    per_sample = {k: v / samples for k, v in flops.items()}
    out["clips_per_batch"] = float(np.mean([len(gb.prefix.lengths) for gb in prepared]))
    out["candidates_per_batch"] = float(np.mean([len(gb.indices) for gb in prepared]))
    out["prefix_tokens_per_clip"] = prefix_tokens / sum(len(gb.prefix.lengths) for gb in prepared)
    out["suffix_tokens_per_candidate"] = suffix_tokens / samples
    out["flops_per_sample"] = per_sample
    if reps:
        out["gpu_only"] = rate_report(reps * samples, gpu_seconds, per_sample["total"])
        log("shared gpu_only", json.dumps(out["gpu_only"]))
    if "check" in parts:
        # Exactness on the device: the shared path against the per-sample path.
        check = examples[:12]
        a = engine.run(check)
        engine.share_prefix = False
        b = engine.run(check)
        engine.share_prefix = True
        out["check_vs_per_sample"] = {
            "samples": len(check),
            "max_abs_score_diff": float(np.abs(a.scores - b.scores).max()),
            "max_abs_score_logit_diff": float(np.abs(a.score_logits - b.score_logits).max()),
            "dtype": str(backbone.dtype),
        }
        log("shared check", json.dumps(out["check_vs_per_sample"]))
    del prepared
    # CPU side alone (decode once per clip, tokenise every candidate).
    cpu = examples[: args.cpu_samples]
    start = time.perf_counter()
    count = 0
    for gb in engine.prepared_groups(cpu, plan_groups(cpu, False)):
        count += len(gb.indices)
    out["cpu_pipeline_samples_per_s"] = count / (time.perf_counter() - start)
    log("shared cpu", out["cpu_pipeline_samples_per_s"])
    # End to end from MP4 files.
    sync(device)
    start = time.perf_counter()
    result = engine.run(examples)
    sync(device)
    seconds = time.perf_counter() - start
    report = rate_report(len(examples), seconds, per_sample["total"])
    report.update(steady_state(result.stats, len(examples), 1))
    report["clips"] = result.stats["shared_clips"]
    report["finite"] = bool(np.isfinite(result.hidden).all())
    assert result.scores is not None
    report["score_mean"] = float(np.mean(result.scores))
    report["score_std"] = float(np.std(result.scores))
    out["end_to_end_scoring"] = report
    log("shared end_to_end", json.dumps(report))
    return out


def section_fused(
    backbone: Any, clips: list[Path], examples: list[RigelExample], device: torch.device,
    args: Any, head: Any,
) -> dict:  # fmt: skip
    """The GPU part alone for both workloads with the compiled elementwise ops (fused RMSNorm,
    SiLU-gate, text and vision rotary), against the same batches unfused; then a kernel
    profile of one fused batch of workload (a)."""
    from training_bridge.rigel import fused
    from training_bridge.rigel.engine.prefix import plan_groups

    out: dict[str, Any] = {}
    engine = ScoringEngine(
        backbone, head, batch_size=args.batch, num_workers=args.workers,
        prefetch_factor=args.prefetch, loader_batch=args.loader_batch, mp_context=args.mp_context,
    )  # fmt: skip
    single = list(engine.device_batches(examples[: 2 * args.batch]))
    vatex = make_vatex_examples(clips, max(2, -(-2 * args.shared_batch // 6)))
    engine.batch_size = args.shared_batch
    shared = list(engine.group_device_batches(vatex, plan_groups(vatex, False)))
    engine.batch_size = args.batch

    def timed(name: str, fn: Any, batches: list[Any]) -> None:
        for b in batches:
            fn(b)
        sync(device)
        start = time.perf_counter()
        for _ in range(args.gpu_reps):
            for b in batches:
                fn(b)
        sync(device)
        n = args.gpu_reps * sum(len(b.indices) for b in batches)
        out[name] = 1000 * (time.perf_counter() - start) / n
        log("fused", name, f"{out[name]:.3f} ms/sample")

    timed("a_gpu_ms_per_sample_unfused", engine.forward_batch, single)
    timed("b_gpu_ms_per_sample_unfused", engine.forward_groups, shared)
    base = engine.forward_batch(single[0])[1].float()
    start = time.perf_counter()
    fused.fuse_elementwise()
    for b in single[:1]:
        engine.forward_batch(b)
    for b in shared[:1]:
        engine.forward_groups(b)
    sync(device)
    out["compile_seconds"] = time.perf_counter() - start
    log("fused compile", out["compile_seconds"])
    timed("a_gpu_ms_per_sample_fused", engine.forward_batch, single)
    timed("b_gpu_ms_per_sample_fused", engine.forward_groups, shared)
    ref = engine.forward_batch(single[0])[1].float()
    out["a_fused_vs_unfused_max_abs_logit_diff"] = float((ref - base).abs().max())
    out["a_logit_scale"] = float(base.abs().max())
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            engine.forward_batch(single[0])
            sync(device)
        table = prof.key_averages().table(
            sort_by="cuda_time_total", row_limit=20, max_name_column_width=70
        )
        out["profile_a_fused"] = table.splitlines()
        print(table, flush=True)
    except Exception as exc:  # the profile is a bonus
        out["profile_error"] = repr(exc)
    fused.restore()
    fused.linear_patch_embed()
    return out


def section_phase2_train(
    backbone: Any, clips: list[Path], device: torch.device, args: Any, head: Any
) -> dict:
    """Training's real Phase 2 step (`training_bridge.rigel.phase2.train_phase2`, with the engine
    as the pipeline passes it on CUDA) on a release of the real data's structure: VATEX-EVAL rows
    (9 references, 6 candidates per clip) on the MP4 files, LoRA r=8/alpha=16 (dropout 0.05, the
    default), effective and micro batch 8, 1 epoch. For each adapter dtype of
    `--phase2-train-dtypes`, eager then with compiled decoder layers (`--phase2-compile`,
    `RigelConfig.phase2_compile`; the compile time shows in `first_step_seconds`). Rates from the
    step callbacks, after the first steps."""
    from torch._dynamo.utils import counters

    from training_bridge.rigel import fused
    from training_bridge.rigel.config import RigelConfig
    from training_bridge.rigel.data import ExampleLoader, ReleaseRecord
    from training_bridge.rigel.head import build_head
    from training_bridge.rigel.phase2 import apply_lora, train_phase2
    from training_bridge.rigel.store import LocalStore

    _, world, _ = dist_info()
    store = LocalStore(clips[0].parent)
    n_clips = max(2, args.phase2_train_samples // 6)
    rows = make_vatex_examples(clips, n_clips)
    rng = np.random.default_rng(0)
    records = [
        ReleaseRecord(
            clip_id=f"vatex{k // 6:04d}",
            candidate_id=f"vatex{k // 6:04d}:{k % 6}",
            text=ex.candidate,
            references=tuple(ex.references),
            normalized=0.5,
            training_class=int(rng.integers(1, 6)),
            video_key=Path(str(ex.video_path)).name,
            duration=5.0,
        )
        for k, ex in enumerate(rows)
    ]
    # The device as the pipeline sets it: its defaults (lora_dtype "auto") depend on it.
    config = RigelConfig(
        backbone=backbone.name,
        device=str(device),
        phase2_checkpoint_every=10_000,
        # "default": the pipeline's (q_proj, v_proj since issue 14), or "wide" (all seven)
        lora_targets=RigelConfig().lora_targets
        if args.phase2_lora_targets == "default"
        else args.phase2_lora_targets,
        phase2_optimizer=args.phase2_optimizer,
        # --phase2-batch: the effective batch over all processes (micro-batches of 8 each)
        phase2_batch_size=args.phase2_batch,
    )
    language_model = backbone.model.model.language_model
    run_head = build_head(backbone.hidden_size, seed=0).to(device)
    peft_model = apply_lora(backbone, config)
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    engine = ScoringEngine(
        backbone, None, batch_size=config.phase2_micro_batch_size, num_workers=args.workers,
        prefetch_factor=args.prefetch, mp_context=args.mp_context,
    )  # fmt: skip
    config_model = backbone.model.config
    # the default visual input (8 frames of the 448 px clips) is 484 video tokens of a 956-token
    # sequence; a preset's frames and pixels change the video part only
    from training_bridge.rigel.images import visual_target_size
    from training_bridge.rigel.modality import VIDEO
    from training_bridge.rigel.video import grid_thw

    vision = backbone.vision
    size = visual_target_size(VIDEO, vision.num_frames, 448, 448, vision)
    patches = int(np.prod(grid_thw(vision.num_frames, size[0], size[1], vision)))
    video_tokens = patches // vision.merge_size**2
    fwd = forward_flops(
        config_model, seq_len=956 - 484 + video_tokens, patches=patches, chunk=video_tokens
    )
    out: dict[str, Any] = {
        "world_size": world,
        "samples": len(records),
        "clips": n_clips,
        "batch": config.phase2_batch_size,
        "micro_batch": config.phase2_micro_batch_size,
        "lora_dropout": config.lora_dropout,
        "lora_targets": list(config.lora_targets),
        "optimizer": config.phase2_optimizer,
        "trainable_parameters": int(sum(p.numel() for p in trainable)),
        "frames": vision.num_frames,
        "video_tokens": video_tokens,
        "patches": patches,
        # language model forward + input-gradient backward per sample; the vision tower forward
        # once per clip (6 candidates)
        "flops_per_sample": 2 * fwd["lm_linear"] + 3 * fwd["lm_attention"]
        + (fwd["vision_linear"] + fwd["vision_attention"] + fwd["mergers"]) / 6,
    }  # fmt: skip
    try:
        for dtype_name in args.phase2_train_dtypes.split(","):
            # "default": the adapters as `apply_lora` made them (the pipeline's `lora_dtype`
            # default); "bf16" / "fp32": cast to that dtype first.
            if dtype_name != "default":
                dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
                with torch.no_grad():
                    for p in trainable:
                        p.data = p.data.to(dtype)
            # Without --phase2-variants: each compile setting --phase2-runs times (the first run
            # of a compiled setting pays the compile). With it: one warm-up run (compiled as the
            # last --phase2-compile setting), then the variants alternated, --phase2-runs rounds.
            variants = [v for v in args.phase2_variants.split(",") if v]
            runs: list[tuple[str, int, str]] = (
                [(setting, k, "") for setting in args.phase2_compile.split(",")
                 for k in range(args.phase2_runs)]
                if not variants
                else [(args.phase2_compile.split(",")[-1], 0, "warmup")]
                + [(args.phase2_compile.split(",")[-1], k, v)
                   for k in range(args.phase2_runs) for v in variants]
            )  # fmt: skip
            for compile_setting, run, variant in runs:
                run_config = config.replace(phase2_compile=compile_setting)
                graphs_before = counters["stats"]["unique_graphs"]
                times: list[float] = []
                skip_guards = variant.endswith("skipguards")

                def on_step(
                    done: int,
                    total: int,
                    loss: float,
                    times: list = times,
                    skip: bool = skip_guards,
                ) -> None:
                    times.append(time.perf_counter())
                    if skip and done == 2:  # every graph compiled by now
                        torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)

                sync(device)
                start = time.perf_counter()
                try:
                    result = train_phase2(
                        backbone=backbone,
                        head=run_head,
                        loader=ExampleLoader(store, frames=backbone.vision.num_frames, lazy=True),
                        records=records,
                        config=run_config,
                        on_step=on_step,
                        engine=engine,
                        # under torchrun: each rank its share of every batch, gradients
                        # all-reduced
                        dist=Distributed.current(),
                        overlap_host=not variant.startswith("sync"),
                        vision_lookahead=1 if "look1" in variant else 8,
                    )
                finally:
                    if skip_guards:
                        torch.compiler.set_stance("default")
                sync(device)
                total = time.perf_counter() - start
                report = rate_report(len(records), total, out["flops_per_sample"], world)
                if times:  # the step callback runs on the main process only
                    # Steps 5 .. n-1: the last callback is left out, since with losses read one
                    # step late (overlap_host) it comes right after the one before it.
                    skip = min(4, len(times) - 3)
                    steady = (
                        (len(times) - 2 - skip)
                        * config.phase2_batch_size
                        / (times[-2] - times[skip])
                    )  # samples/s of all processes together
                    report["steady_samples_per_s"] = steady
                    report["steady_tflops_per_s"] = steady * out["flops_per_sample"] / 1e12
                    report["steady_fraction_of_bf16_peak"] = (
                        steady * out["flops_per_sample"] / (H100_BF16_DENSE_PEAK * world)
                    )
                report["first_step_seconds"] = times[0] - start if times else None
                report["steps"] = result.steps
                report["mean_loss"] = result.mean_loss
                report["lora_adapter_dtype"] = dtype_name
                report["lora_parameter_dtypes"] = sorted({str(p.dtype) for p in trainable})
                report["phase2_compile"] = compile_setting
                report["variant"] = variant or None
                report["compiled_layers"] = fused.compiled_decoder_layers(language_model)
                # graphs dynamo compiled during this run (0 when an earlier run's fit)
                report["compiled_graphs"] = counters["stats"]["unique_graphs"] - graphs_before
                key = (
                    f"train_phase2_{dtype_name}_{compile_setting}"
                    + (f"_{variant}" if variant else "")
                    + (f"_run{run}" if run else "")
                )
                out[key] = report
                log("phase2_train", key, json.dumps(report))
                # the next run (eager, or another dtype) starts from uncompiled layers (a repeat
                # of a compiled run compiles again, from dynamo's cache)
                fused.uncompile_decoder_layers(language_model)
            for variant in variants:
                rates = [
                    r["steady_samples_per_s"] for k, r in out.items()
                    if isinstance(r, dict) and r.get("variant") == variant
                    and r.get("lora_adapter_dtype") == dtype_name and "steady_samples_per_s" in r
                ]  # fmt: skip
                if rates:
                    out[f"summary_{dtype_name}_{variant}"] = {
                        "steady_samples_per_s_median": statistics.median(rates),
                        "min": min(rates),
                        "max": max(rates),
                        "runs": rates,
                    }
                    log(
                        "phase2_summary",
                        variant,
                        json.dumps(out[f"summary_{dtype_name}_{variant}"]),
                    )
            if args.phase2_profile_steps:
                # One more run (not timed) under torch.profiler over a few steady steps; under
                # torchrun every rank trains (the collectives need them all) and rank 0, the
                # one that gets the step callback, profiles.
                profiled = Phase2Profile(
                    device, args.phase2_profile_start, args.phase2_profile_steps
                )
                run_config = config.replace(phase2_compile=args.phase2_compile.split(",")[-1])
                try:
                    train_phase2(
                        backbone=backbone,
                        head=run_head,
                        loader=ExampleLoader(store, frames=backbone.vision.num_frames, lazy=True),
                        records=records,
                        config=run_config,
                        on_step=profiled.on_step,
                        engine=engine,
                        dist=Distributed.current(),
                    )
                finally:
                    profiled.stop()
                out[f"profile_{dtype_name}"] = profiled.summary(
                    config.phase2_batch_size, out["flops_per_sample"]
                )
                log("phase2_profile", json.dumps(out[f"profile_{dtype_name}"])[:3000])
                fused.uncompile_decoder_layers(language_model)
    finally:
        # leave the backbone without LoRA (and uncompiled) for the sections after this one
        fused.uncompile_decoder_layers(language_model)
        backbone.model = peft_model.unload()
        backbone.extra.pop("peft_model", None)
    return out


class Phase2Profile:
    """torch.profiler over steps ``start`` + 1 .. ``start`` + ``steps`` of a Phase 2 run (through
    the step callback), and a summary of where those steps' wall time went: GPU kernel time and
    the GPU's idle gaps, the host's waits (stream synchronisations, scalar read-backs, the
    DataLoader's ``__next__``, i.e. waiting on the decoding workers), the top kernels and the top
    host operations. The trace itself goes to ``$OUT/phase2_trace.json.gz`` when ``OUT`` is set."""

    def __init__(self, device: torch.device, start: int, steps: int):
        self.device = device
        self.start_step = start
        self.steps = steps
        self.prof: Any = None
        self.times: list[float] = []

    def on_step(self, done: int, total: int, loss: float) -> None:
        from torch.profiler import ProfilerActivity, profile

        if done == self.start_step:
            sync(self.device)
            self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            self.prof.start()
            self.times.append(time.perf_counter())
        elif self.prof is not None and len(self.times) <= self.steps:
            self.times.append(time.perf_counter())
            if len(self.times) == self.steps + 1:
                self.stop()

    def stop(self) -> None:
        if self.prof is not None and not getattr(self, "stopped", False):
            sync(self.device)
            self.prof.stop()
            self.stopped = True

    def summary(self, batch: int, flops_per_sample: float) -> dict[str, Any]:
        if self.prof is None or len(self.times) < 2:
            return {"error": "the run ended before the profiled steps"}
        steps = len(self.times) - 1
        wall = self.times[-1] - self.times[0]
        gpu: list[tuple[int, int]] = []
        kernels: dict[str, list[float]] = {}
        for event in self.prof.profiler.kineto_results.events():
            if event.device_type() != torch.autograd.DeviceType.CUDA:
                continue
            begin, length = event.start_ns(), event.duration_ns()
            gpu.append((begin, begin + length))
            row = kernels.setdefault(event.name()[:100], [0, 0.0])
            row[0] += 1
            row[1] += length / 1e6
        gpu.sort()
        busy, gaps, cursor = 0, [], None
        for begin, end in gpu:
            if cursor is None or begin > cursor:
                if cursor is not None:
                    gaps.append((begin - cursor) / 1e6)
                busy += end - begin
                cursor = end
            elif end > cursor:
                busy += end - cursor
                cursor = end
        span = (gpu[-1][1] - gpu[0][0]) / 1e6 if gpu else 0.0
        averages = self.prof.key_averages()
        host = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)
        watch = (
            "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync",
            "aten::item", "aten::_local_scalar_dense", "aten::nonzero", "cudaLaunchKernel",
            "cuLaunchKernel", "cuLaunchKernelEx", "Optimizer.step", "aten::copy_",
            "autograd::engine::evaluate_function", "CompiledFunction", "CompiledFunctionBackward",
        )  # fmt: skip
        waits = {
            e.key: {"count": e.count, "cpu_ms_total": e.cpu_time_total / 1000,
                    "self_cpu_ms": e.self_cpu_time_total / 1000}
            for e in averages
            if e.key in watch or "DataLoader" in e.key or e.key.startswith("enumerate(")
        }  # fmt: skip
        out = {
            "steps": steps,
            "wall_ms_per_step": 1000 * wall / steps,
            "samples_per_s_while_profiled": steps * batch / wall,
            "gpu_busy_ms_per_step": busy / 1e6 / steps,
            "gpu_busy_fraction_of_wall": busy / 1e9 / wall,
            "gpu_span_ms": span,
            "gpu_idle_gaps_ms_per_step": sum(gaps) / steps,
            "gpu_gaps_over_1ms": sorted(gaps, reverse=True)[:20],
            "gpu_gaps_count": len(gaps),
            "gpu_bound_samples_per_s": steps * batch / (busy / 1e9) if busy else None,
            "gpu_tflops_while_busy": steps * batch * flops_per_sample / (busy / 1e9) / 1e12
            if busy else None,
            "host_waits": waits,
            "top_kernels": [
                {"kernel": k, "calls": v[0], "ms_per_step": v[1] / steps}
                for k, v in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:25]
            ],
            "top_host_ops": [
                {"op": e.key[:100], "count": e.count, "self_cpu_ms_per_step":
                 e.self_cpu_time_total / 1000 / steps, "cpu_ms_per_step":
                 e.cpu_time_total / 1000 / steps}
                for e in host[:25]
            ],
        }  # fmt: skip
        folder = os.environ.get("OUT")
        if folder:
            import gzip
            import shutil as _shutil
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                trace = Path(tmp) / "trace.json"
                self.prof.export_chrome_trace(str(trace))
                target = Path(folder) / "phase2_trace.json.gz"
                with trace.open("rb") as src, gzip.open(target, "wb", compresslevel=6) as dst:
                    _shutil.copyfileobj(src, dst)
                out["trace_file"] = target.name
                out["trace_bytes"] = target.stat().st_size
        return out


def _time_steps(step: Any, device: torch.device, warmup: int, steps: int) -> float:
    for k in range(warmup):
        step(k)
    sync(device)
    start = time.perf_counter()
    for k in range(steps):
        step(k)
    sync(device)
    return time.perf_counter() - start


# --------------------------------------------------------------------------------------------


SECTIONS = ("env", "hf", "engine", "shared", "phase2_train", "fused")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results/gpu")
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU, small sizes")
    parser.add_argument("--backbone", default=None)
    parser.add_argument("--sections", default="env,hf,engine,phase2_train")
    parser.add_argument("--clips", default=None, help="folder of MP4 files (made if missing)")
    parser.add_argument("--n-clips", type=int, default=24)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--cpu-samples", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--prefetch", type=int, default=4)
    parser.add_argument("--refs", type=int, default=9)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--phase2-steps", type=int, default=30)
    parser.add_argument("--loader-batch", type=int, default=8)
    parser.add_argument("--fuse", action="store_true", help="compiled fused elementwise ops")
    parser.add_argument("--shared-samples", type=int, default=1536)
    parser.add_argument("--shared-batch", type=int, default=128, help="candidates per batch")
    parser.add_argument("--group-loader-batch", type=int, default=2)
    parser.add_argument("--gpu-reps", type=int, default=3)
    parser.add_argument("--teacher-samples", type=int, default=0)
    parser.add_argument("--phase2-train-samples", type=int, default=240)
    parser.add_argument("--shared-parts", default="gpu,check,cpu,e2e")
    parser.add_argument(
        "--mp-context", default="fork", help="the engine's worker start: fork|forkserver"
    )
    parser.add_argument(
        "--phase2-train-dtypes",
        default="fp32,bf16",
        help="comma list: default (as apply_lora makes them), fp32, bf16",
    )
    parser.add_argument(
        "--phase2-compile",
        default="off,on",
        help="comma list: off, on (phase2_train: eager and/or compiled decoder layers)",
    )
    parser.add_argument(
        "--phase2-lora-targets",
        default="default",
        help="phase2_train: default (the pipeline's, q_proj,v_proj), wide, or a comma list",
    )
    parser.add_argument(
        "--phase2-optimizer", default="adam", choices=("adam", "adamw"), help="phase2_train"
    )
    parser.add_argument(
        "--preset",
        default=None,
        choices=("default", "paper-budget"),
        help="visual input of training_bridge.rigel.config.PRESETS for every section (none: 8 "
        "frames, the benchmark backbone's own pixel budget)",
    )
    parser.add_argument("--resume", action="store_true", help="skip sections already in the file")
    parser.add_argument(
        "--limits", default="", help="per-section watchdog seconds, e.g. shared=80,engine=90"
    )
    parser.add_argument(
        "--phase2-batch", type=int, default=8, help="phase2_train: effective batch, all ranks"
    )
    parser.add_argument(
        "--phase2-runs", type=int, default=1, help="phase2_train: runs of each compile setting"
    )
    parser.add_argument(
        "--phase2-profile-steps",
        type=int,
        default=0,
        help="phase2_train: one more run, these steps under torch.profiler (rank 0)",
    )
    parser.add_argument(
        "--phase2-profile-start", type=int, default=10, help="profile after this step"
    )
    parser.add_argument(
        "--phase2-variants",
        default="",
        help="phase2_train: comma list alternated after a warm-up run: overlap (losses read "
        "one step late, the default), sync (read at each step's end), *_skipguards (dynamo "
        "evaluates only differentiating guards after step 2), *_look1 (the vision tower per "
        "micro-batch instead of 8 micro-batches ahead)",
    )
    parser.add_argument(
        "--raw", default="", help="also write the results through bench/provenance.py as NAME"
    )
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--synthetic-captions",
        action="store_true",
        help="stand-in captions instead of VATEX-EVAL's (the raw file says so); without it a "
        "missing data/vatex_eval file stops the benchmark",
    )
    args = parser.parse_args()
    phase2_dtypes = args.phase2_train_dtypes.split(",")
    if "default" in phase2_dtypes[1:] or len(set(phase2_dtypes)) != len(phase2_dtypes):
        # after a cast the adapters are no longer as apply_lora made them, and a repeated name
        # would overwrite its own result
        parser.error("--phase2-train-dtypes: 'default' only first, and each name once")
    phase2_compile = args.phase2_compile.split(",")
    if set(phase2_compile) - {"off", "on"} or len(set(phase2_compile)) != len(phase2_compile):
        parser.error("--phase2-compile: off and/or on, each once")

    rank, world, local = dist_info()
    if args.smoke:
        device = torch.device("cpu")
        args.backbone = args.backbone or "tiny"
        args.samples = min(args.samples, 12)
        args.cpu_samples = min(args.cpu_samples, 8)
        args.batch = min(args.batch, 4)
        args.phase2_steps = min(args.phase2_steps, 3)
        args.reps = 1
        args.gpu_reps = 1
        args.shared_samples = min(args.shared_samples, 24)
        args.shared_batch = min(args.shared_batch, 12)
        args.phase2_train_samples = min(args.phase2_train_samples, 24)
    else:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    if world > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if args.workers is None:
        per_rank = max(1, (os.cpu_count() or 2) // world - 1)
        args.workers = 0 if args.smoke else per_rank
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = f"{args.tag}" + (f"_world{world}" if world > 1 else "")
    sections = args.sections.split(",")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        # `variants` and `phase2` (runs A-C: a bench-side Phase 2 with plain peft) were removed in
        # issue 27: bench/gpu/scoring_limits.py and the `phase2_train` section measure them now.
        parser.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")

    global SYNTHETIC_CAPTIONS
    SYNTHETIC_CAPTIONS = bool(args.synthetic_captions)
    if not SYNTHETIC_CAPTIONS:
        caption_pool()  # a missing input stops the run before any measurement
    results: dict[str, Any] = {
        "argv": sys.argv[1:],
        "inputs": input_files(),
        "world_size": world,
        # the code that ran, where it differs from the checkout provenance records (sync_device.sh)
        "code_revision": os.environ.get("LEPUS_CODE_REVISION"),
    }
    path = out_dir / f"results{suffix}.json"
    if args.resume and path.exists():
        results = json.loads(path.read_text())
        results.setdefault("attempts", []).append(sys.argv[1:])
    done = {k for k, v in results.items() if isinstance(v, dict) and "error" not in v}
    limits = {k: float(v) for k, v in (x.split("=") for x in args.limits.split(",") if x)}

    def save(name: str, data: dict) -> None:
        """All sections of a run in one file, rewritten after each section."""
        results[name] = data
        if rank == 0:
            path.write_text(json.dumps(results, indent=2, default=str))
            log("wrote", name, "to", path)

    def watchdog(name: str) -> None:
        """A hang costs at most the section's limit: dump every thread's stack, then exit (the
        caller may start the script again with --resume for the remaining sections)."""
        import faulthandler

        faulthandler.cancel_dump_traceback_later()
        if name in limits:
            save(name, {"error": f"no result within the watchdog limit of {limits[name]} s"})
            faulthandler.dump_traceback_later(limits[name], exit=True)

    if "env" in sections and "env" not in done:
        save("env", section_env(device))
    clip_dir = Path(args.clips) if args.clips else out_dir / "clips"
    size = 96 if args.smoke else 448
    clips = make_clips(
        clip_dir, args.n_clips if not args.smoke else 3, size, 5.0 if not args.smoke else 1.0, 24
    )
    examples = make_examples(
        clips,
        max(args.samples, 8 * (args.phase2_steps + 3) * world, 2 * args.batch * world),
        args.refs,
    )
    todo = [n for n in sections if n != "env" and n not in done]
    if not todo:
        return
    started = time.perf_counter()
    backbone = load_backbone(args.backbone or "qwen3-vl-2b-random", device=device, seed=0)
    if args.preset:
        from training_bridge.rigel.backbone import with_frame_budget
        from training_bridge.rigel.config import PRESETS

        backbone.vision = with_frame_budget(backbone.vision, **PRESETS[args.preset])
        results["preset"] = {"name": args.preset, **PRESETS[args.preset]}
    log("backbone", backbone.name, f"{time.perf_counter() - started:.1f}s")
    results["backbone_build_seconds"] = time.perf_counter() - started
    head = ScoreHead(backbone.hidden_size).to(device)
    for name in todo:
        if name == "hf" and world > 1:
            continue
        try:
            log("section", name)
            watchdog(name)
            section_start = time.perf_counter()
            if name == "hf":
                data = section_hf(backbone, examples, device, args)
            elif name == "shared":
                data = section_shared(backbone, clips, device, args, head)
            elif name == "phase2_train":
                data = section_phase2_train(backbone, clips, device, args, head)
            elif name == "fused":
                data = section_fused(backbone, clips, examples, device, args, head)
            else:  # "engine" (main checked the names)
                data = section_engine(backbone, examples, device, args, head)
            data["card"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
            data["backbone"] = backbone.name
            data["section_seconds"] = time.perf_counter() - section_start
            save(name, data)
        except Exception:
            err = traceback.format_exc()
            log("section", name, "failed\n", err)
            save(name, {"error": err})
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    import faulthandler

    faulthandler.cancel_dump_traceback_later()
    if args.raw and rank == 0:
        write_raw(args.raw, results)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
