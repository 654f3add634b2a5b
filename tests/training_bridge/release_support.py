"""A small Vid-Lepus release on disk, in the export format, for the training tests."""

from __future__ import annotations

import io
import json
import random

import numpy as np
from PIL import Image

from training_bridge.rigel.store import Store

WORDS = ("man", "woman", "dog", "ball", "kitchen", "guitar", "street", "runs", "plays", "cuts")


def jpeg(rng: np.random.Generator, size: int = 32) -> bytes:
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=80)
    return buffer.getvalue()


def write_release(
    store: Store,
    prefix: str,
    *,
    clips: dict[str, int] | None = None,
    candidates_per_clip: int = 4,
    frames: int = 4,
    seed: int = 0,
) -> dict[str, list[dict]]:
    """Write `data/<split>.jsonl` and each clip's JPEG frames; returns the records per split.

    `clips` maps split -> number of clips (default: 3 train, 2 validation).
    """
    clips = clips or {"train": 3, "validation": 2}
    rng = np.random.default_rng(seed)
    chooser = random.Random(seed)
    records: dict[str, list[dict]] = {}
    number = 0
    for split, clip_count in clips.items():
        rows = []
        for _ in range(clip_count):
            number += 1
            clip_id = f"clip{seed}_{number:03d}_000010_000020"
            frames_key = f"clips/{clip_id}/frames"
            for index in range(frames):
                store.put_bytes(f"{frames_key}/{index:03d}.jpg", jpeg(rng))
            references = [" ".join(chooser.choice(WORDS) for _ in range(5)) for _ in range(2)]
            for position in range(candidates_per_clip):
                overall = round(chooser.uniform(1, 5), 4)
                training_class = min(5, max(1, int(overall + 0.5)))
                rows.append(
                    {
                        "clip_id": clip_id,
                        "video_key": f"clips/{clip_id}/video.mp4",
                        "frames_key": frames_key,
                        "start": 10.0,
                        "end": 20.0,
                        "duration": 10.0,
                        "references": references,
                        "candidate_id": f"{clip_id}:cand:{position}",
                        "text": " ".join(chooser.choice(WORDS) for _ in range(4 + position)),
                        "system": "test-captioner",
                        "system_version": "1.0",
                        "scores": {"overall": overall},
                        "overall": overall,
                        "normalized": (overall - 1) / 4,
                        "training_class": training_class,
                        "judgments": 3,
                        "review_status": "",
                    }
                )
        store.put_bytes(
            f"{prefix}/data/{split}.jsonl",
            ("\n".join(json.dumps(row, sort_keys=True) for row in rows) + "\n").encode(),
        )
        records[split] = rows
    return records


def tiny_settings(**overrides: object) -> dict[str, object]:
    """Hyper-parameters that keep a tiny run to a few seconds."""
    values: dict[str, object] = {
        "frames": 4,
        "teacher_batch_size": 4,
        "teacher_shard_size": 8,
        "phase1_epochs": 3,
        "phase1_patience": 5,
        "phase2_batch_size": 4,
        "phase2_micro_batch_size": 2,
        "phase2_checkpoint_every": 1,
        "eval_batch_size": 8,
        # METEOR's JVM costs ~12 s of CPU per evaluation; its correctness is tested with the metrics.
        "standard_metrics": ["bleu4", "rougeL", "cider"],
    }
    values.update(overrides)
    return values
