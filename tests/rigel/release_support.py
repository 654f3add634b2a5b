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


def small_phase2_release(store: Store, name: str, seed: int) -> list:
    """A release of 3 training clips x 4 candidates (and one validation clip); its training
    records."""
    from training_bridge.rigel.data import read_release

    write_release(
        store, name, clips={"train": 3, "validation": 1}, candidates_per_clip=4, seed=seed
    )
    return read_release(store, name)["train"]


def comparable_phase2_config(**overrides: object):  # type: ignore[no-untyped-def]
    """The tiny Phase 2 that two runs are compared on, number for number: global batch 4 in
    micro-batches of 2 (12 training samples of `small_phase2_release` -> 3 steps) and no LoRA
    dropout."""
    from training_bridge.rigel.config import RigelConfig

    return RigelConfig(
        backbone="tiny",
        **tiny_settings(phase2_batch_size=4, phase2_micro_batch_size=2),
        lora_dropout=0.0,
        **overrides,
    )


def phase2_on_a_fresh_tiny_backbone(
    store: Store, records: list, config: object, *, engine_factory=None, lazy: bool = False
):  # type: ignore[no-untyped-def]
    """Phase 2 from seed 0 on a freshly built tiny backbone and head (LoRA injected here); returns
    the result, the LoRA weights and the backbone."""
    import torch

    from training_bridge.rigel.backbone import load_backbone
    from training_bridge.rigel.data import ExampleLoader
    from training_bridge.rigel.head import build_head
    from training_bridge.rigel.phase2 import apply_lora, lora_state, train_phase2

    torch.manual_seed(0)
    backbone = load_backbone("tiny", device="cpu")
    head = build_head(backbone.hidden_size, seed=0)
    apply_lora(backbone, config)
    result = train_phase2(
        backbone=backbone,
        head=head,
        loader=ExampleLoader(store, frames=4, lazy=lazy),
        records=records,
        config=config,
        engine=engine_factory(backbone) if engine_factory else None,
    )
    return result, lora_state(backbone.extra["peft_model"]), backbone


def assert_same_phase2_training(expected, expected_lora, actual, actual_lora) -> None:  # type: ignore[no-untyped-def]
    """Two Phase 2 runs trained alike: step losses, mean loss and LoRA weights, which moved."""
    import pytest
    import torch

    assert actual.steps == expected.steps
    assert [h["loss"] for h in actual.history] == pytest.approx(
        [h["loss"] for h in expected.history], rel=1e-5
    )
    assert actual.mean_loss == pytest.approx(expected.mean_loss, rel=1e-5)
    for name, tensor in expected_lora.items():
        torch.testing.assert_close(actual_lora[name], tensor, rtol=1e-4, atol=1e-6)
    assert any(float(t.abs().sum()) > 0 for k, t in actual_lora.items() if "lora_B" in k)


def add_image_records(
    store: Store,
    prefix: str,
    split: str,
    *,
    images: int,
    candidates_per_image: int = 3,
    seed: int = 0,
) -> list[dict]:
    """Append still-image records to `data/<split>.jsonl`, as the export writes them (image
    contract): `modality` "image", the one training frame under `frames_key` (`000.jpg`) and the
    display file at `image_key`, no start/end/duration. Returns the new records."""
    rng = np.random.default_rng(1000 + seed)
    chooser = random.Random(1000 + seed)
    rows = []
    for number in range(images):
        image_id = f"img{seed}_{split}_{number:03d}"
        frames_key = f"clips/{image_id}/frames"
        picture = jpeg(rng, size=48)
        store.put_bytes(f"{frames_key}/000.jpg", picture)
        store.put_bytes(f"clips/{image_id}/image.jpg", picture)
        references = [" ".join(chooser.choice(WORDS) for _ in range(5)) for _ in range(2)]
        for position in range(candidates_per_image):
            overall = round(chooser.uniform(1, 5), 4)
            rows.append(
                {
                    "clip_id": image_id,
                    "modality": "image",
                    "image_key": f"clips/{image_id}/image.jpg",
                    "video_key": "",
                    "frames_key": frames_key,
                    "start": None,
                    "end": None,
                    "duration": None,
                    "references": references,
                    "candidate_id": f"{image_id}:cand:{position}",
                    "text": " ".join(chooser.choice(WORDS) for _ in range(3 + position)),
                    "system": "test-captioner",
                    "system_version": "1.0",
                    "scores": {"overall": overall},
                    "overall": overall,
                    "normalized": (overall - 1) / 4,
                    "training_class": min(5, max(1, int(overall + 0.5))),
                    "judgments": 3,
                    "review_status": "",
                }
            )
    key = f"{prefix}/data/{split}.jsonl"
    existing = store.read_bytes(key).decode() if store.exists(key) else ""
    added = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    store.put_bytes(key, (existing + added).encode())
    return rows
