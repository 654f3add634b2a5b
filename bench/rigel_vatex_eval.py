"""`evaluate_rigel`'s scoring on the whole of VATEX-EVAL: all three protocols (reference-free,
1-ref, all-refs = the paper's 9-ref) over its 18,000 candidates (3,000 clips x 6), end to end from
MP4 files through `ScoringEngine`, on one GPU (target: under 5 minutes on one H100).

The YouTube videos cannot be fetched here: one synthetic H.264 MP4 per clip stands in (448 px,
5 s at 24 fps, as bench/gpu_rigel.py makes them), so the decode cost is real and no two clips share
a file (sharing would merge their reference-free prompts). The model has Qwen3-VL-2B-Instruct's
exact dimensions with random weights and a random scoring head (a trained run's shapes); its
correlations are recorded but mean nothing. The path is the one `evaluate_rigel` takes:
`rigel.benchmark.ProtocolScorer` + `score_protocols`, then
`training_bridge.metrics.benchmark.correlation_row` with the per-rater protocol.

    python bench/rigel_vatex_eval.py --out bench/results/rigel_vatex_eval          # GPU
    python bench/rigel_vatex_eval.py --smoke --out /tmp/rigel_vatex_eval_smoke     # CPU, tiny
    # the two visual-input presets (training_bridge.rigel.config.PRESETS), one after the other
    python bench/rigel_vatex_eval.py --preset default --out bench/results/rigel_vatex_eval_default
    python bench/rigel_vatex_eval.py --preset paper-budget \
        --out bench/results/rigel_vatex_eval_paper_budget

Writes <out>/rigel_vatex_eval[_smoke].json: commit, command, date, machine, versions, setup times
and, per protocol, seconds, samples/s, ms/sample and the engine's statistics (tokens, video tokens,
patches, shared-prefix counts; tokens per sample and matmul FLOPs per sample from them, see
`workload_counts`); the total scoring time and whether it is under 300 s.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the engine's worker processes do the CPU work
import itertools
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# imported before anything runs: provenance takes the start load average and time at import
from provenance import median_min_max, write_raw  # noqa: E402

VATEX_EVAL = ROOT / "data" / "vatex_eval" / "vid_cans_score_dict.json"
TARGET_SECONDS = 300.0


def load_vatex_eval(limit_clips: int | None) -> dict[str, Any]:
    data = json.loads(VATEX_EVAL.read_text(encoding="utf-8"))
    clip_ids, candidates, references, raters = [], [], [], []
    for number, (clip_id, entry) in enumerate(data.items()):
        if limit_clips is not None and number >= limit_clips:
            break
        ratings = ast.literal_eval(entry["scores"])
        for text, rating in zip(entry["cands"], ratings, strict=True):
            clip_ids.append(clip_id)
            candidates.append(text)
            references.append(list(entry["refs"][0]))
            raters.append(rating)
    return {
        "clip_ids": clip_ids,
        "candidates": candidates,
        "references": references,
        "raters": np.asarray(raters, dtype=np.float64),
    }


def make_clip(
    path: Path, number: int, size: int, seconds: float, fps: int, keyframes: Sequence[int] = ()
) -> None:
    """One synthetic H.264 MP4 (testsrc2 with moving noise, a hue per clip, 2 s GOPs): with the
    ffmpeg binary where there is one, else through PyAV's own FFmpeg (the GPU hosts have no ffmpeg
    binary); the same filters and encoder settings either way. ``keyframes``: frame numbers that
    are also made keyframes (e.g. the frames the scoring engine samples)."""
    if path.exists():
        return
    if shutil.which("ffmpeg") is None:
        _make_clip_pyav(path, number, size, seconds, fps, keyframes)
        return
    forced = ["-force_key_frames", "expr:" + "+".join(f"eq(n,{n})" for n in keyframes)]
    subprocess.run(
        [
            "ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
            f"testsrc2=size={size}x{size}:rate={fps}:duration={seconds}",
            "-vf", f"noise=alls=6:allf=t,hue=h={number % 360}", "-pix_fmt", "yuv420p",
            "-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-g", str(2 * fps),
            "-movflags", "+faststart", "-threads", "1", *(forced if keyframes else []), str(path),
        ],
        check=True,
    )  # fmt: skip


def make_still(path: Path, number: int, width: int = 500, height: int = 375) -> None:
    """One synthetic JPEG still (a Flickr-sized 500x375 picture: a hue per image, noise, a few
    shapes), deterministic per number: the image benchmarks' visual input (T = 1)."""
    if path.exists():
        return
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(number)
    base = np.zeros((height, width, 3), dtype=np.float32)
    base[..., 0] = (number * 37) % 256
    base[..., 1] = np.linspace(0, 255, width)[None, :]
    base[..., 2] = np.linspace(255, 0, height)[:, None]
    noisy = np.clip(base + rng.normal(0, 24, base.shape), 0, 255).astype(np.uint8)
    image = Image.fromarray(noisy)
    draw = ImageDraw.Draw(image)
    for _ in range(4):
        x, y = int(rng.integers(0, width - 60)), int(rng.integers(0, height - 60))
        size = int(rng.integers(20, 120))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        draw.ellipse((x, y, x + size, y + size), fill=colour)
    image.save(path, quality=90)


def _make_clip_pyav(
    path: Path, number: int, size: int, seconds: float, fps: int, keyframes: Sequence[int] = ()
) -> None:
    import av

    graph = av.filter.Graph()
    chain = [
        graph.add("testsrc2", f"size={size}x{size}:rate={fps}:duration={seconds}"),
        graph.add("noise", "alls=6:allf=t"),
        graph.add("hue", f"h={number % 360}"),
        graph.add("format", "yuv420p"),
        graph.add("buffersink"),
    ]
    for source, target in itertools.pairwise(chain):
        source.link_to(target)
    graph.configure()
    partial = path.with_name(f".partial-{path.name}")
    with av.open(str(partial), "w", format="mp4", options={"movflags": "+faststart"}) as out:
        stream = out.add_stream(
            "libx264",
            rate=fps,
            options={"preset": "veryfast", "crf": "23", "g": str(2 * fps), "threads": "1"},
        )
        stream.width, stream.height, stream.pix_fmt = size, size, "yuv420p"
        wanted = set(keyframes)
        for n in itertools.count():
            try:
                frame = chain[-1].pull()
            except (av.error.EOFError, av.error.BlockingIOError):
                break
            # testsrc2 marks every frame as an I picture and libx264 obeys a frame's type: without
            # this reset every frame became a keyframe (all-intra, 2.7x the ffmpeg binary's bytes
            # and 3.3x its decoding time); the ffmpeg binary resets it the same way
            frame.pict_type = (
                av.video.frame.PictureType.I if n in wanted else av.video.frame.PictureType.NONE
            )
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    partial.replace(path)


class CountingEngine:
    """The engine `ProtocolScorer` would make, with its per-run statistics added up in ``totals``
    (shared by the engines of both prompt settings; the caller takes differences per protocol).
    ``rows["packed"]``: the suffix rows of the run in progress (`--suffix-rows`), and
    ``rows["two_level"]``: its prefix levels (`--prefix-levels`), set on the engine before each
    run."""

    COUNTS = (
        "tokens", "video_tokens", "patches", "shared_samples", "shared_clips", "prefix_tokens",
        "suffix_tokens", "batches", "vision_clips", "shared_prefix_tokens", "two_level_batches",
    )  # fmt: skip
    # the shared-prefix path's split of its time: waiting for batches, forward and read-back
    TIMES = ("wait_seconds", "forward_seconds")

    def __init__(
        self,
        engine: Any,
        totals: dict[str, int],
        rows: dict[str, bool] | None = None,
        marks: list[list[float]] | None = None,
    ) -> None:
        self.engine = engine
        self.totals = totals
        self.rows = rows if rows is not None else {"packed": True, "two_level": True}
        # per engine run, the seconds from its start at which each batch was stored
        self.marks = marks if marks is not None else []

    def run(self, examples: Sequence[Any], **options: Any) -> Any:
        self.engine.pack_suffixes = self.rows["packed"]
        self.engine.two_level_prefix = self.rows.get("two_level", False)
        caller = options.pop("progress", None)
        marks: list[float] = []
        self.marks.append(marks)
        started = time.perf_counter()

        def progress(done: int) -> None:
            marks.append(round(time.perf_counter() - started, 4))
            if caller is not None:
                caller(done)

        output = self.engine.run(examples, progress=progress, **options)
        self.totals["samples"] = self.totals.get("samples", 0) + len(examples)
        for key in self.COUNTS:
            self.totals[key] = self.totals.get(key, 0) + int(output.stats.get(key, 0))
        for key in self.TIMES:
            seconds = self.totals.get(key, 0) + float(output.stats.get(key, 0.0))
            self.totals[key] = round(seconds, 3)  # type: ignore[assignment]
        return output

    def close(self) -> None:
        self.engine.close()


def compile_state() -> dict[str, float]:
    """torch.compile's work so far in this process: seconds in Dynamo's compile (tracing and
    Inductor, cache hits included) and graphs compiled."""
    from torch._dynamo import utils

    return {
        "compile_seconds": sum(utils.compilation_time_metrics.get("_compile.compile_inner", [])),
        "compiled_graphs": float(utils.counters["stats"].get("unique_graphs", 0)),
    }


def allocator_state(device: Any) -> dict[str, float]:
    """The CUDA caching allocator's counters (cudaMalloc / cudaFree calls, retries after a
    failed allocation) and its peak reservation."""
    import torch

    if device.type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    return {
        "cuda_mallocs": stats.get("num_device_alloc", 0),
        "cuda_frees": stats.get("num_device_free", 0),
        "alloc_retries": stats.get("num_alloc_retries", 0),
        "peak_reserved_gib": round(stats.get("reserved_bytes.all.peak", 0) / 2**30, 2),
    }


def batch_timeline(marks: list[list[float]]) -> dict[str, Any]:
    """Where a run's time went batch by batch: each engine run's intervals between stored
    batches (the first from the run's start), their median, and the time above the median per
    tenth of the batches (a first run's extra cost shows as where it falls)."""
    intervals = [b - a for run in marks if run for a, b in zip([0.0, *run[:-1]], run, strict=True)]
    if not intervals:
        return {}
    median = float(np.median(intervals))
    excess = np.maximum(np.asarray(intervals) - median, 0.0)
    tenths = [float(part.sum()) for part in np.array_split(excess, 10)]
    return {
        "batches": len(intervals),
        "first_intervals": [round(x, 3) for x in intervals[:8]],
        "median_interval": round(median, 4),
        "excess_over_median_seconds": round(float(excess.sum()), 3),
        "excess_by_tenth": [round(x, 3) for x in tenths],
        "intervals": [round(x, 4) for x in intervals],
    }


def workload_counts(
    counts: dict[str, int], model_config: Any, frames: int, temporal_patch: int
) -> dict[str, Any]:
    """Tokens and matmul FLOPs per sample (`engine.flops`, 2 per multiply-add) from one protocol's
    engine statistics. ``executed``: what the engine ran (a clip's shared prefix once for all its
    candidates); ``per_inference``: one candidate scored alone (its clip's prefix + its own
    suffix: the paper's "per inference"). Exact for the linear layers and the vision tower; the
    attention terms use the mean prefix and suffix lengths, and a clip's prefix counts once per
    candidate in ``per_inference`` assuming each clip has the same number of candidates (6 in
    VATEX-EVAL). On the two-level path (`engine/levels.py`) a clip's shared part runs once for its
    prompt settings: ``executed`` counts its attention once per clip (one per vision-tower pass),
    each setting's own part against it, each suffix against both."""
    from training_bridge.rigel.engine.flops import forward_flops

    samples = counts.get("samples", 0)
    if not samples:
        return {}
    shared_samples, shared_clips = counts["shared_samples"], counts["shared_clips"]
    single = samples - shared_samples
    single_tokens = counts["tokens"] - counts["prefix_tokens"] - counts["suffix_tokens"]
    visual_inputs = shared_clips + single  # one vision-tower pass each
    patches_per_input = counts["patches"] / visual_inputs if visual_inputs else 0.0
    groups = max(1, frames // max(1, temporal_patch))
    chunk = patches_per_input / groups  # patches per temporal group (vision attention span)
    prefix = counts["prefix_tokens"] / shared_clips if shared_clips else 0.0
    suffix = counts["suffix_tokens"] / shared_samples if shared_samples else 0.0
    single_len = single_tokens / single if single else 0.0
    full_tokens = (shared_samples * (prefix + suffix) + single_tokens) / samples

    def total(seq_len: float, patches: float) -> dict[str, float]:
        return forward_flops(model_config, seq_len=seq_len, patches=patches, chunk=chunk)

    per_inference = {
        key: (shared_samples * value + single * total(single_len, patches_per_input)[key]) / samples
        for key, value in total(prefix + suffix, patches_per_input).items()
    }
    # executed: each shared clip's prefix (with its vision pass) once, every suffix attending to
    # its prefix and causally to itself; the single-path samples in full
    text = model_config.text_config
    per_token_lm = forward_flops(model_config, seq_len=1.0, patches=0.0, chunk=1.0)["lm_linear"]
    q_width = text.num_attention_heads * text.head_dim
    # the two-level path: a shared part per clip (its vision-tower pass), then each group's own
    # part; without it the shared part is empty and each group's own part its whole prefix
    shared_tokens = counts.get("shared_prefix_tokens", 0)
    clips = counts.get("vision_clips", shared_clips)
    shared_part = shared_tokens / clips if shared_tokens and clips else 0.0
    own = (counts["prefix_tokens"] - shared_tokens) / shared_clips if shared_clips else 0.0
    pairs = (
        clips * shared_part * (shared_part + 1) / 2
        + shared_clips * (own * shared_part + own * (own + 1) / 2)
        + shared_samples * (suffix * prefix + suffix * (suffix + 1) / 2)
    )
    vision = total(0.0, patches_per_input)
    # the vision tower's passes: one per clip and prompt setting, or, the protocols scored
    # together, one per clip (the engine's vision_clips)
    vision_passes = counts.get("vision_clips", shared_clips) + single
    executed = {
        "lm_linear": per_token_lm * counts["tokens"],
        "lm_attention": 4 * q_width * text.num_hidden_layers * pairs
        + single * total(single_len, 0.0)["lm_attention"],
    }
    for key in ("vision_linear", "vision_attention", "mergers"):
        executed[key] = vision_passes * vision[key]
    executed = {key: value / samples for key, value in executed.items()}
    executed["total"] = sum(executed.values())
    return {
        "engine_counts": dict(counts),
        "tokens_per_sample_executed": counts["tokens"] / samples,
        "tokens_per_sample_full": full_tokens,
        "video_tokens_per_visual_input": counts["video_tokens"] / visual_inputs
        if visual_inputs
        else 0.0,
        "patches_per_visual_input": patches_per_input,
        "vision_tower_passes": vision_passes,
        "mean_prefix_tokens": prefix,
        "mean_shared_prefix_tokens": shared_part,
        "mean_suffix_tokens": suffix,
        "flops_per_sample_executed": executed,
        "flops_per_sample_per_inference": per_inference,
    }


def score_agreement(
    first: dict[str, Any], second: dict[str, Any], protocols: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Per protocol: the largest absolute difference and Kendall's tau between two runs' scores."""
    from scipy.stats import kendalltau

    agreement = {}
    for protocol in protocols:
        a, b = np.asarray(first[protocol]), np.asarray(second[protocol])
        agreement[protocol] = {
            "max_abs_difference": float(np.abs(a - b).max()),
            "kendall_tau": float(kendalltau(a, b).statistic),
        }
    return agreement


def profile_together(
    scorer: Any,
    data: dict[str, Any],
    clips: Sequence[Any],
    protocols: Sequence[str],
    chosen: set[str],
    layout: str,
) -> dict[str, Any]:
    """The protocols in one pass on the candidates of ``chosen`` clips under torch.profiler:
    wall time, the GPU's kernel time (the sum of every kernel's own time) and the 15 kernels
    that took most of it. Not part of the timed rounds (the profiler slows the host)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from training_bridge.rigel.benchmark import score_protocols

    rows = [k for k, clip_id in enumerate(data["clip_ids"]) if clip_id in chosen]
    scorer.model.backbone.prompt_layout = layout
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        score_protocols(
            scorer,
            clips=[clips[k] for k in rows],
            candidates=[data["candidates"][k] for k in rows],
            references=[data["references"][k] for k in rows],
            protocols=list(protocols),
            together=True,
        )
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    from torch.autograd import DeviceType

    # the kernels' own rows (an operator's row repeats the time of the kernels it launched)
    events = [
        e
        for e in prof.key_averages()
        if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0
    ]
    kernel_us = sum(e.self_device_time_total for e in events)
    top = sorted(events, key=lambda e: e.self_device_time_total, reverse=True)[:15]
    return {
        "clips": len(chosen),
        "samples": len(rows) * len(protocols),
        "wall_seconds": round(wall, 3),
        "gpu_kernel_seconds": round(kernel_us / 1e6, 3),
        "gpu_busy_fraction": round(kernel_us / 1e6 / wall, 3),
        "top_kernels": [
            {
                "name": e.key[:120],
                "seconds": round(e.self_device_time_total / 1e6, 4),
                "share": round(e.self_device_time_total / kernel_us, 4),
                "calls": e.count,
            }
            for e in top
        ],
    }


def versions() -> dict[str, Any]:
    import torch
    import transformers

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
    }
    try:
        import peft

        info["peft"] = peft.__version__
    except ImportError:
        info["peft"] = None
    try:
        info["ffmpeg"] = subprocess.run(
            ["ffmpeg", "-version"], capture_output=True, text=True, check=True
        ).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError):
        info["ffmpeg"] = None
    return info


def machine(device: Any) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_memory_gib"] = round(
            torch.cuda.get_device_properties(device).total_memory / 2**30, 1
        )
    return info


def commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/rigel_vatex_eval")
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU, a few clips")
    parser.add_argument("--clips-dir", default=None, help="MP4 folder (made if missing)")
    parser.add_argument("--limit-clips", type=int, default=None, help="first N clips only")
    parser.add_argument("--batch", type=int, default=128, help="candidates per engine batch")
    parser.add_argument("--workers", type=int, default=-1, help="decoding processes (-1: auto)")
    parser.add_argument("--compile", default="auto", choices=("auto", "on", "off"))
    parser.add_argument(
        "--chunk",
        type=int,
        default=18000,
        help="candidates per engine.run call (per protocol; each call starts its own decoding "
        "pipeline; VATEX-EVAL has 18,000)",
    )
    parser.add_argument("--protocols", default="reference-free,1-ref,all-refs")
    parser.add_argument(
        "--images",
        action="store_true",
        help="score VATEX-EVAL's captions on synthetic JPEG stills (T = 1, the image path) "
        "instead of MP4 clips",
    )
    parser.add_argument(
        "--preset",
        default=None,
        choices=("default", "paper-budget"),
        help="visual input of training_bridge.rigel.config.PRESETS (none: 8 frames, the "
        "benchmark backbone's own pixel budget)",
    )
    parser.add_argument(
        "--modes",
        default="separate",
        help="comma-separated: separate (one engine pass per protocol) and/or together (the "
        "protocols in one pass: each clip decoded and through the vision tower once)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the modes, alternated")
    parser.add_argument(
        "--prompt-layouts",
        default="candidate-last",
        help="comma-separated prompt layouts (training_bridge.rigel.prompts.PROMPT_LAYOUTS), "
        "alternated within each round; with more than one, each run is keyed MODE/LAYOUT",
    )
    parser.add_argument(
        "--suffix-rows",
        default="packed",
        help="comma-separated, alternated within each round: packed (a clip's candidates in one "
        "row, the engine's default) and/or per-candidate (one row per candidate against a copy "
        "of its clip's cache); with both, each run is keyed MODE/LAYOUT/ROWS",
    )
    parser.add_argument(
        "--prefix-levels",
        default="one",
        help="comma-separated, alternated within each round: two (a clip's shared part, the "
        "video in it, once for its protocols, engine/levels.py) and/or one (each protocol's whole "
        "prefix: the engine's default); with both, each run is keyed .../LEVELS",
    )
    parser.add_argument(
        "--profile-clips",
        type=int,
        default=0,
        help="after the timed rounds, the protocols together on the first N clips under "
        "torch.profiler (CUDA): GPU kernel time against wall time, and the top kernels",
    )
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"separate", "together"}:
        parser.error("--modes: separate and/or together")
    suffix_rows = [m for m in args.suffix_rows.split(",") if m]
    if not suffix_rows or set(suffix_rows) - {"packed", "per-candidate"}:
        parser.error("--suffix-rows: packed and/or per-candidate")
    prefix_levels = [m for m in args.prefix_levels.split(",") if m]
    if not prefix_levels or set(prefix_levels) - {"two", "one"}:
        parser.error("--prefix-levels: two and/or one")
    from training_bridge.rigel.prompts import PROMPT_LAYOUTS

    layouts = [m for m in args.prompt_layouts.split(",") if m]
    if not layouts or set(layouts) - set(PROMPT_LAYOUTS):
        parser.error(f"--prompt-layouts: one or more of {', '.join(PROMPT_LAYOUTS)}")

    import torch

    from training_bridge.metrics.benchmark import BenchmarkSet, correlation_row
    from training_bridge.rigel.backbone import load_backbone
    from training_bridge.rigel.benchmark import BenchmarkClip, ProtocolScorer, score_protocols
    from training_bridge.rigel.config import RigelConfig
    from training_bridge.rigel.data import ExampleLoader
    from training_bridge.rigel.head import build_head
    from training_bridge.rigel.scoring import TrainedRigel
    from training_bridge.rigel.store import LocalStore

    started = time.perf_counter()
    device = torch.device("cpu" if args.smoke else "cuda")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    limit = args.limit_clips if args.limit_clips is not None else (3 if args.smoke else None)
    data = load_vatex_eval(limit)
    clip_order = list(dict.fromkeys(data["clip_ids"]))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    clip_dir = Path(args.clips_dir) if args.clips_dir else out_dir / "clips"
    clip_dir.mkdir(parents=True, exist_ok=True)
    size, seconds, fps = (96, 1.0, 24) if args.smoke else (448, 5.0, 24)
    suffix = ".jpg" if args.images else ".mp4"
    files = {clip_id: f"vatex_{number:05d}{suffix}" for number, clip_id in enumerate(clip_order)}

    def make(item: tuple[int, str]) -> None:
        if args.images:
            make_still(clip_dir / item[1], item[0])
        else:
            make_clip(clip_dir / item[1], item[0], size, seconds, fps)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        list(pool.map(make, enumerate(files.values())))
    clips_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    backbone_name = "tiny" if args.smoke else "qwen3-vl-2b-random"
    backbone = load_backbone(backbone_name, device=device, seed=0)
    head = build_head(backbone.hidden_size, seed=0).to(device)
    model = TrainedRigel(backbone=backbone, head=head, reference_free=False)
    from training_bridge.rigel.backbone import with_frame_budget
    from training_bridge.rigel.config import PRESETS

    visual = dict(PRESETS[args.preset]) if args.preset else {}
    config = RigelConfig(
        backbone=backbone_name,
        device=str(device),
        frames=visual.get("frames", 8 if not args.smoke else 4),
        frame_pixels=visual.get("frame_pixels", 0),
        eval_batch_size=args.batch if not args.smoke else 4,
        engine="on",
        engine_workers=args.workers if not args.smoke else 0,
        engine_compile=args.compile if not args.smoke else "off",
    )
    backbone.vision = with_frame_budget(
        backbone.vision, frames=config.frames, frame_pixels=config.frame_pixels
    )
    load_seconds = time.perf_counter() - t0
    store = LocalStore(clip_dir)
    totals: dict[str, int] = {}
    # --suffix-rows and --prefix-levels of the run in progress
    suffix_state = {"packed": True, "two_level": True}
    marks: list[list[float]] = []  # the engines' batch times in the run in progress

    def counting_engine(engine_config: RigelConfig, samples: int) -> Any:
        from training_bridge.rigel.pipeline import make_engine

        engine = make_engine(
            backbone, engine_config, head=head, batch_size=config.eval_batch_size, samples=samples
        )
        return CountingEngine(engine, totals, suffix_state, marks) if engine is not None else None

    scorer = ProtocolScorer(
        model,
        config,
        ExampleLoader(store, frames=config.frames, lazy=True),
        chunk_size=args.chunk,
        engine_factory=counting_engine,
    )
    clips = [
        BenchmarkClip(clip_id=c, image_key=files[c], modality="image")
        if args.images
        else BenchmarkClip(clip_id=c, video_key=files[c], duration=seconds)
        for c in data["clip_ids"]
    ]
    benchmark = BenchmarkSet(
        candidates=data["candidates"],
        references=data["references"],
        human=data["raters"].mean(axis=1),
        rater_scores=data["raters"],
        rater_names=["slot-1", "slot-2", "slot-3"],
    )
    protocols = [p for p in args.protocols.split(",") if p]
    report: dict[str, Any] = {
        "benchmark": "rigel_vatex_eval",
        "commit": commit(),
        "command": [sys.executable, *sys.argv],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(device),
        "versions": versions(),
        "inputs": {
            "vatex_eval": {
                "path": str(VATEX_EVAL.relative_to(ROOT)),
                "sha256": hashlib.sha256(VATEX_EVAL.read_bytes()).hexdigest(),
            }
        },
        "workload": {
            "candidates": len(data["candidates"]),
            "clips": len(clip_order),
            "references_per_clip": len(data["references"][0]) if data["references"] else 0,
            "protocols": protocols,
            "samples": len(data["candidates"]) * len(protocols),
            "visual_input": (
                "synthetic JPEG still 500x375 per clip, scored as an image (T = 1)"
                if args.images
                else f"synthetic H.264 {size}x{size}, {seconds} s at {fps} fps, one file per clip"
            ),
            "backbone": backbone_name + " (random weights)",
            "frames": config.frames,
            "preset": args.preset,
            "frame_pixels": config.frame_pixels,
            "batch": config.eval_batch_size,
            "chunk": args.chunk,
            "engine_compile": config.engine_compile,
            "cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            "prompt_layouts": layouts,
            "prefix_levels": prefix_levels,
        },
        "setup_seconds": {
            "make_clips": round(clips_seconds, 3),
            "load_model": round(load_seconds, 3),
        },
        "protocols": {},
        "note": "random weights: the correlations show the protocol runs, not skill",
    }
    frames_per_input = 1 if args.images else config.frames
    temporal_patch = getattr(backbone.model.config.vision_config, "temporal_patch_size", 2)

    def separate_protocols(round_number: int) -> None:
        """One engine pass per protocol (the per-protocol figures of the first round are kept
        in report["protocols"], as before; later rounds add their seconds)."""
        for protocol in protocols:
            before = dict(totals)
            t0 = time.perf_counter()
            scores = score_protocols(
                scorer,
                clips=clips,
                candidates=data["candidates"],
                references=data["references"],
                protocols=[protocol],
            )[protocol]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - t0
            count = len(scores)
            if round_number:
                report["protocols"][protocol].setdefault("later_rounds_seconds", []).append(
                    round(elapsed, 3)
                )
                continue
            report.setdefault("separate_scores", {})[protocol] = [
                float(x) for x in np.round(scores, 6)
            ]
            report["protocols"][protocol] = {
                "seconds": round(elapsed, 3),
                "samples": count,
                "samples_per_s": round(count / elapsed, 2),
                "ms_per_sample": round(1000 * elapsed / count, 3),
                "score_mean": float(np.mean(scores)),
                "score_std": float(np.std(scores)),
                "correlation_per_rater_x100": correlation_row(
                    scores, benchmark, protocol="emscore"
                ),
            }
            counts = {key: totals.get(key, 0) - before.get(key, 0) for key in totals}
            report["protocols"][protocol].update(
                workload_counts(counts, backbone.model.config, frames_per_input, temporal_patch)
            )
            print(protocol, json.dumps(report["protocols"][protocol]), flush=True)

    def together_run() -> dict[str, Any]:
        before = dict(totals)
        marks.clear()
        compiled, allocated = compile_state(), allocator_state(device)
        t0 = time.perf_counter()
        scores = score_protocols(
            scorer,
            clips=clips,
            candidates=data["candidates"],
            references=data["references"],
            protocols=protocols,
            together=True,
        )
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - t0
        count = sum(len(v) for v in scores.values())
        counts = {key: totals.get(key, 0) - before.get(key, 0) for key in totals}
        run: dict[str, Any] = {
            "seconds": round(elapsed, 3),
            "samples": count,
            "samples_per_s": round(count / elapsed, 2),
            "ms_per_sample": round(1000 * elapsed / count, 3),
            "scores": {p: [float(x) for x in np.round(v, 6)] for p, v in scores.items()},
            "correlation_per_rater_x100": {
                p: correlation_row(v, benchmark, protocol="emscore") for p, v in scores.items()
            },
        }
        run.update(workload_counts(counts, backbone.model.config, frames_per_input, temporal_patch))
        for name, value in compile_state().items():
            run[name] = round(value - compiled[name], 3)
        run["allocator"] = {
            k: v if k.startswith("peak") else v - allocated.get(k, 0)
            for k, v in allocator_state(device).items()
        }
        run["timeline"] = batch_timeline(marks)
        return run

    scoring_started = time.perf_counter()
    runs_of = [
        (m, lay, rows, lev)
        for lev in prefix_levels
        for rows in suffix_rows
        for lay in layouts
        for m in modes
    ]

    def key_of(mode: str, layout: str, rows: str, levels: str) -> str:
        return "/".join(
            [mode]
            + ([layout] if len(layouts) > 1 else [])
            + ([rows] if len(suffix_rows) > 1 else [])
            + ([levels] if len(prefix_levels) > 1 else [])
        )

    report["modes"] = {key_of(*run): [] for run in runs_of}
    try:
        for round_number in range(args.rounds):
            for mode, layout, rows, levels in runs_of:
                key = key_of(mode, layout, rows, levels)
                backbone.prompt_layout = layout  # the engines' workers copy it per run
                suffix_state["packed"] = rows == "packed"  # the engines read it per run
                suffix_state["two_level"] = levels == "two"
                if mode == "together":
                    run = together_run()
                    scores_of_run = run.pop("scores")
                    run["prompt_layout"] = layout
                    run["suffix_rows"] = rows
                    run["prefix_levels"] = levels
                    report["modes"][key].append(run)
                    if layout == layouts[0]:
                        report.setdefault("together_scores", scores_of_run)
                        if levels == prefix_levels[0]:
                            report.setdefault("scores_by_rows", {}).setdefault(rows, scores_of_run)
                        if rows == "packed":
                            by_levels = report.setdefault("scores_by_levels", {})
                            by_levels.setdefault(levels, scores_of_run)
                    print(
                        "together",
                        key,
                        round_number,
                        run["seconds"],
                        json.dumps(
                            {
                                "compile_seconds": run["compile_seconds"],
                                "first_batch": run["timeline"].get("first_intervals", [None])[0],
                                "excess": run["timeline"].get("excess_over_median_seconds"),
                                "wait": run.get("engine_counts", {}).get("wait_seconds"),
                            }
                        ),
                        flush=True,
                    )
                else:
                    started_mode = time.perf_counter()
                    first = (layout, rows, levels) == (layouts[0], suffix_rows[0], prefix_levels[0])
                    separate_protocols(round_number if first else 1)
                    report["modes"][key].append(
                        {
                            "seconds": round(time.perf_counter() - started_mode, 3),
                            "prompt_layout": layout,
                        }
                    )
                    print("separate", layout, round_number, report["modes"][key][-1], flush=True)
        for mode, runs in report["modes"].items():
            report.setdefault("headline", {})[mode] = median_min_max(
                [run["seconds"] for run in runs]
            )
        # the same scores within bf16 rounding: largest difference and Kendall tau per protocol
        if "together_scores" in report and "separate_scores" in report:
            report["together_vs_separate"] = score_agreement(
                report["together_scores"], report["separate_scores"], protocols
            )
        if len(report.get("scores_by_rows", {})) == 2:
            report["packed_vs_per_candidate"] = score_agreement(
                report["scores_by_rows"]["packed"],
                report["scores_by_rows"]["per-candidate"],
                protocols,
            )
        if len(report.get("scores_by_levels", {})) == 2:
            report["two_vs_one_level"] = score_agreement(
                report["scores_by_levels"]["two"], report["scores_by_levels"]["one"], protocols
            )
        report.pop("scores_by_levels", None)
        report.pop("scores_by_rows", None)
        report.pop("together_scores", None)
        report.pop("separate_scores", None)
        if args.profile_clips and device.type == "cuda":
            report["profile"] = profile_together(
                scorer, data, clips, protocols, set(clip_order[: args.profile_clips]), layouts[0]
            )
            print("profile", json.dumps(report["profile"])[:1500], flush=True)
    finally:
        scorer.close()
    total = time.perf_counter() - scoring_started
    report["scoring_seconds"] = round(total, 3)

    report["under_target"] = total < TARGET_SECONDS
    report["target_seconds"] = TARGET_SECONDS
    report["wall_seconds"] = round(time.perf_counter() - started, 3)
    name = f"rigel_vatex_eval{'_images' if args.images else ''}{'_smoke' if args.smoke else ''}"
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True))

    write_raw(name, report)
    print(f"wrote {path}: {total:.1f} s for {report['workload']['samples']} samples", flush=True)


if __name__ == "__main__":
    main()
