"""Make rigel_vatex_eval.py's synthetic clips ahead of its run, in processes (PyAV's encoder holds
the GIL for part of the work): python bench/make_vatex_clips.py DIR [N] [--keyframes-at-samples K].

``--keyframes-at-samples K`` also makes keyframes of the K frames the scoring engine samples
(``video.sample_indices``), as an ingest could for clips it knows will be scored: decoding then
needs those K frames only."""

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import rigel_vatex_eval as bench

SIZE, SECONDS, FPS = 448, 5.0, 24


def one(directory: str, keyframes: tuple[int, ...], item: tuple[int, str]) -> None:
    number, name = item
    bench.make_clip(Path(directory) / name, number, SIZE, SECONDS, FPS, keyframes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("count", nargs="?", type=int, default=3000)
    parser.add_argument("--keyframes-at-samples", type=int, default=0, metavar="K")
    args = parser.parse_args()
    Path(args.directory).mkdir(parents=True, exist_ok=True)
    keyframes: tuple[int, ...] = ()
    if args.keyframes_at_samples:
        from training_bridge.rigel.video import sample_indices

        keyframes = tuple(
            int(n) for n in sample_indices(int(SECONDS * FPS), args.keyframes_at_samples)
        )
    names = [f"vatex_{number:05d}.mp4" for number in range(args.count)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        list(pool.map(partial(one, args.directory, keyframes), enumerate(names), chunksize=8))
    print(
        f"{args.count} clips in {time.perf_counter() - t0:.1f} s (keyframes also at {list(keyframes)})"
    )
