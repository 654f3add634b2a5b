"""Make rigel_vatex_eval.py's synthetic clips ahead of its run, in processes (PyAV's encoder holds
the GIL for part of the work): python bench/make_vatex_clips.py DIR [N]."""

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rigel_vatex_eval as bench


def one(item: tuple[int, str]) -> None:
    number, name = item
    bench.make_clip(Path(sys.argv[1]) / name, number, 448, 5.0, 24)


if __name__ == "__main__":
    Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    names = [f"vatex_{number:05d}.mp4" for number in range(count)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        list(pool.map(one, enumerate(names), chunksize=8))
    print(f"{count} clips in {time.perf_counter() - t0:.1f} s")
