"""Check our plain-torch preprocessing against transformers' official Qwen3-VL processor.

Needs torchvision (the official ``Qwen3VLVideoProcessor`` requires it), so it runs where torchvision
is importable: the GPU machine's image (carry a transformers 5.24 wheel to compare the same
version), or a throwaway venv. It compares, per case, ``pixel_values_videos`` (exact),
``video_grid_thw``, ``input_ids`` and ``mm_token_type_ids``; it also measures how far the CUDA path
(float resize) is from the CPU processor, and times the official processor on one CPU core on the
benchmark workload. With ``--write-fixtures DIR`` it saves the small cases as ``.npz`` fixtures for
``tests/rigel/test_inputs_processor_parity.py``.

    python bench/gpu/processor_parity.py --out parity.json [--write-fixtures DIR]

The report is also written as a raw file under bench/results/ (or `LEPUS_BENCH_RESULTS`) through
bench/provenance.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# imported before anything runs: provenance takes the start load average and time at import
from provenance import write_raw

from training_bridge.rigel import prompts
from training_bridge.rigel.backbone import (
    CHAT_TEMPLATE,
    QWEN3_VL_BENCH_VIDEO,
    VisionSettings,
    build_tokenizer,
    load_backbone,
)
from training_bridge.rigel.inputs import RigelExample, encode_example


def smooth_frames(rng: np.random.Generator, t: int, h: int, w: int) -> np.ndarray:
    """Natural-ish frames: low-frequency colour fields plus a little noise."""
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    frames = []
    for k in range(t):
        phase = rng.uniform(0, 6.28, 3)
        base = np.stack(
            [
                127 + 100 * np.sin(xs / (7 + 3 * c) + ys / (11 + 2 * c) + phase[c] + 0.3 * k)
                for c in range(3)
            ],
            axis=-1,
        )
        frames.append(np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8))
    return np.stack(frames)


CASES = [
    # name, frames shape, indices, fps, vision settings, references, candidate, fixture?
    (
        "small_hub",
        (4, 40, 56),
        [0, 3, 6, 9],
        3.0,
        VisionSettings(),
        ["a red ball ."],
        "a ball",
        True,
    ),
    (
        "downscale",
        (5, 96, 130),
        [0, 7, 14, 21, 28],
        7.0,
        VisionSettings(min_pixels=4096, max_pixels=18432),
        ["two dogs run on a beach .", "dogs play in the sand ."],
        "two dogs are running",
        True,
    ),
    (
        "capped",
        (8, 64, 64),
        [0, 17, 34, 51, 68, 85, 102, 119],
        24.0,
        VisionSettings(min_pixels=4096, max_pixels=8 * 32 * 32 * 4, cap_pixels_per_frame=True),
        ["a man slices bread in a kitchen ."] * 3,
        "a man cuts bread",
        True,
    ),
    (
        "bench_448",
        (8, 448, 448),
        [0, 17, 34, 51, 68, 85, 102, 119],
        24.0,
        QWEN3_VL_BENCH_VIDEO,
        [
            f"reference caption number {i} about a person doing something in a room ."
            for i in range(9)
        ],
        "a person is doing something in a room",
        False,
    ),
]


def official_processor(tokenizer, vision: VisionSettings):  # type: ignore[no-untyped-def]
    from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

    try:
        from transformers import Qwen2VLImageProcessor as ImageProcessor
    except ImportError:  # older naming
        from transformers import Qwen2VLImageProcessorFast as ImageProcessor  # type: ignore

    video = Qwen3VLVideoProcessor(
        patch_size=vision.patch_size,
        temporal_patch_size=vision.temporal_patch_size,
        merge_size=vision.merge_size,
        image_mean=list(vision.image_mean),
        image_std=list(vision.image_std),
        size={"shortest_edge": vision.min_pixels, "longest_edge": vision.max_pixels},
    )
    return Qwen3VLProcessor(
        image_processor=ImageProcessor(),
        tokenizer=tokenizer,
        video_processor=video,
        chat_template=CHAT_TEMPLATE,
    )


def run_official(processor, prompt: str, frames: np.ndarray, indices, fps, vision):  # type: ignore[no-untyped-def]
    from transformers.video_utils import VideoMetadata

    metadata = VideoMetadata(
        total_num_frames=int(max(indices)) + 1, fps=fps, frames_indices=list(indices)
    )
    return processor(
        text=[prompt],
        videos=[frames],
        video_metadata=[metadata],
        do_sample_frames=False,
        cap_pixels_per_frame=vision.cap_pixels_per_frame,
        return_tensors="pt",
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="parity.json")
    parser.add_argument("--write-fixtures", default=None)
    args = parser.parse_args()
    import transformers

    torch.set_num_threads(1)
    report: dict = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "cases": {},
    }
    rng = np.random.default_rng(20251126)
    fixtures: dict[str, np.ndarray] = {}
    for name, shape, indices, fps, vision, refs, cand, fixture in CASES:
        kind = "large" if name == "bench_448" else "tiny"
        backbone = load_backbone("tiny", device="cpu", vision=vision)
        if kind == "large":
            backbone.tokenizer = build_tokenizer("large")
            backbone.video_token_id = backbone.tokenizer.convert_tokens_to_ids("<|video_pad|>")
            backbone.image_token_id = backbone.tokenizer.convert_tokens_to_ids("<|image_pad|>")
            backbone.vision_start_token_id = backbone.tokenizer.convert_tokens_to_ids(
                "<|vision_start|>"
            )
            backbone.vision_end_token_id = backbone.tokenizer.convert_tokens_to_ids(
                "<|vision_end|>"
            )
        tokenizer = backbone.tokenizer
        frames = smooth_frames(rng, *shape)
        example = RigelExample(
            references=refs, candidate=cand, frames=frames, fps=fps, frame_indices=indices
        )
        prompt = prompts.render_prompt(
            tokenizer, references=refs, candidate=cand, reference_free=False
        )
        processor = official_processor(tokenizer, vision)
        official_s = ours_s = float("inf")
        for _ in range(2):  # the second call is the steady-state time
            started = time.perf_counter()
            official = run_official(processor, prompt, frames, indices, fps, vision)
            official_s = min(official_s, time.perf_counter() - started)
            started = time.perf_counter()
            ours = encode_example(example, backbone, reference_free=False)
            ours_s = min(ours_s, time.perf_counter() - started)
        pv_off = official["pixel_values_videos"]
        result = {
            "grid_official": official["video_grid_thw"].tolist(),
            "grid_ours": [list(ours.grid)],
            "pixel_values_equal": bool(torch.equal(pv_off, ours.pixel_values)),
            "pixel_values_max_abs_diff": float((pv_off - ours.pixel_values).abs().max())
            if pv_off.shape == ours.pixel_values.shape
            else None,
            "input_ids_equal": official["input_ids"][0].tolist() == ours.input_ids,
            "mm_token_type_ids_equal": official["mm_token_type_ids"][0].tolist()
            == [
                2 if i == backbone.video_token_id else 1 if i == backbone.image_token_id else 0
                for i in ours.input_ids
            ],
            "tokens": len(ours.input_ids),
            "official_cpu_seconds_1_thread": official_s,
            "ours_cpu_seconds_1_thread": ours_s,
        }
        if torch.cuda.is_available():
            gpu = encode_example(example, backbone, reference_free=False, device="cuda")
            diff = (gpu.pixel_values.cpu() - pv_off).abs()
            result["cuda_path_max_abs_diff"] = float(diff.max())
            result["cuda_path_fraction_differing"] = float((diff > 0).float().mean())
        if not result["input_ids_equal"]:
            off_text = tokenizer.decode(official["input_ids"][0])
            ours_text = tokenizer.decode(ours.input_ids)
            k = next(
                (i for i, (a, b) in enumerate(zip(off_text, ours_text, strict=False)) if a != b),
                None,
            )
            result["first_text_difference"] = {
                "official": off_text[max(0, (k or 0) - 80) : (k or 0) + 80],
                "ours": ours_text[max(0, (k or 0) - 80) : (k or 0) + 80],
            }
        report["cases"][name] = result
        print(name, json.dumps(result), flush=True)
        if fixture and args.write_fixtures:
            directory = Path(args.write_fixtures)
            directory.mkdir(parents=True, exist_ok=True)
            meta = {
                "references": refs,
                "candidate": cand,
                "indices": indices,
                "fps": fps,
                "vision": {
                    "min_pixels": vision.min_pixels,
                    "max_pixels": vision.max_pixels,
                    "cap_pixels_per_frame": vision.cap_pixels_per_frame,
                },
                "transformers": transformers.__version__,
                "prompt": prompt,
            }
            fixtures.update(
                {
                    f"{name}__frames": frames,
                    f"{name}__pixel_values_videos": pv_off.numpy(),
                    f"{name}__video_grid_thw": official["video_grid_thw"].numpy(),
                    f"{name}__input_ids": official["input_ids"].numpy(),
                    f"{name}__mm_token_type_ids": official["mm_token_type_ids"].numpy(),
                    f"{name}__meta": np.array(json.dumps(meta)),
                }
            )
    if fixtures and args.write_fixtures:
        np.savez_compressed(
            Path(args.write_fixtures) / "qwen3vl_processor_fixtures.npz", **fixtures
        )
    Path(args.out).write_text(json.dumps(report, indent=2))

    write_raw("processor_parity", report)


if __name__ == "__main__":
    main()
