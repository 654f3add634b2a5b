"""Issue 17, point 2: can NVDEC take video decoding off the CPU, with the frames left on the GPU?

The scoring engine decodes on the CPU (PyAV, one process per core): on the H100 hosts 115–131 ms
of CPU for the 8 sampled frames of one clip, which bounds end-to-end scoring near 10 ms/sample
(docs/benchmarks.md, "Issue 17, second pass"). FFmpeg's CUDA hwaccel through PyAV copied every
surface back to host memory and saved no CPU. This probe measures NVIDIA's PyNvVideoCodec
(``SimpleDecoder``, NVDEC, the decoded RGB frames handed to torch through DLPack on the GPU):

- per thread count (``--threads``), clips decoded per second and CPU milliseconds per clip, the
  same 8 frames per clip the engine samples (``video.sample_indices``), one decoder per thread
  reused across clips (``reconfigure_decoder``);
- the pixels against PyAV's software decode of the same frames (mean and largest absolute
  difference; the colour conversion differs, so they are not expected to be equal).

One raw file (bench/provenance.py). Needs a GPU and the ``PyNvVideoCodec`` wheel:

    python3 bench/gpu/nvdec_probe.py --clips /tmp/clips --threads 1,4,8,16
"""

from __future__ import annotations

import argparse
import json
import os
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

from provenance import write_raw

from training_bridge.rigel.video import decode_video, sample_indices

FRAMES = 8


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
    indices = sample_indices(len(decoder), FRAMES).tolist()
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", required=True)
    parser.add_argument("--n-clips", type=int, default=128)
    parser.add_argument("--threads", default="1,4,8,16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compare", type=int, default=16, help="clips compared with PyAV")
    parser.add_argument("--name", default="nvdec_probe")
    args = parser.parse_args()
    clips = sorted(Path(args.clips).glob("*.mp4"))[: args.n_clips]
    out: dict[str, Any] = {"args": vars(args), "clips": len(clips)}
    out["code_revision"] = os.environ.get("LEPUS_CODE_REVISION")
    try:
        import PyNvVideoCodec as nvc

        out["pynvvideocodec"] = getattr(nvc, "__version__", "unknown")
        torch.zeros(1, device="cuda")
        decoder, _ = decode_clip(nvc, None, clips[0])  # the first session (NVDEC warm-up)
        diffs = []
        for path in clips[: args.compare]:
            decoder, frames = decode_clip(nvc, decoder, path)
            reference = decode_video(path, FRAMES, backend="av").frames
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
        for threads in [int(t) for t in args.threads.split(",")]:
            result = rate(nvc, clips, threads, args.rounds)
            out["rates"].append(result)
            print("nvdec", json.dumps(result), flush=True)
    except Exception:
        out["error"] = traceback.format_exc()[-3000:]
        print(out["error"], flush=True)
    cpu0 = time.process_time()
    for path in clips[:24]:
        decode_video(path, FRAMES, backend="av")
    out["pyav_cpu_ms_per_clip"] = 1000 * (time.process_time() - cpu0) / min(24, len(clips))
    print("pyav cpu ms/clip", out["pyav_cpu_ms_per_clip"], flush=True)
    print("raw", write_raw(args.name, out, notes="issue 17 point 2: NVDEC through PyNvVideoCodec"))


if __name__ == "__main__":
    main()
