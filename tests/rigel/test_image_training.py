"""Training on a mix of clips and still images, as the paper does (issue 26, point 3).

The release carries video records and image records (the image contract: `modality`, the one
training frame under `frames_key`, `image_key`); every step of a tiny run (teacher, Phase 1,
Phase 2, evaluation) takes both, an image as one frame through the image path, and Phase 2 runs
Table 4's "1 (image) / 1 (video)" epochs in the order the config asks for.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.rigel.release_support import add_image_records, tiny_settings, write_release
from training_bridge.rigel import inputs
from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.data import (
    ExampleLoader,
    ReleaseFormatError,
    ReleaseRecord,
    has_media,
    parse_record,
    read_release,
    read_training_release,
)
from training_bridge.rigel.phase2 import data_order, epoch_orders
from training_bridge.rigel.pipeline import STEPS, RunSpec, run_step
from training_bridge.rigel.store import LocalStore


def _mixed_release(store: LocalStore, prefix: str, seed: int) -> None:
    write_release(
        store, prefix, clips={"train": 2, "validation": 1, "test": 1}, candidates_per_clip=3,
        seed=seed,
    )  # fmt: skip
    add_image_records(store, prefix, "train", images=2, seed=seed)
    add_image_records(store, prefix, "validation", images=1, seed=seed)
    add_image_records(store, prefix, "test", images=1, seed=seed)


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):  # type: ignore[no-untyped-def]
    store = LocalStore(tmp_path_factory.mktemp("mixed"))
    _mixed_release(store, "releases/mix", seed=41)
    config = RigelConfig(
        backbone="tiny",
        **tiny_settings(standard_metrics=[], phase2_batch_size=3, phase2_micro_batch_size=3),
    )
    spec = RunSpec(
        run_prefix="runs/mix", release_prefix="releases/mix", release_key="mix", config=config
    )
    seen: dict[str, Counter[str]] = {}
    original = inputs.build_batch
    results: dict = {}  # type: ignore[type-arg]
    for step in STEPS:

        def spy(examples, *args, step=step, **kwargs):  # type: ignore[no-untyped-def]
            counter = seen.setdefault(step, Counter())
            for example in examples:
                counter[example.modality] += 1
                if example.modality == "image":
                    frames = inputs.load_video(example, args[0].vision).frames
                    counter[f"image frames {len(frames)}"] += 1
            return original(examples, *args, **kwargs)

        inputs.build_batch = spy  # type: ignore[assignment]
        try:
            results[step] = run_step(step, spec=spec, store=store, results=results)
        finally:
            inputs.build_batch = original  # type: ignore[assignment]
    return store, spec, results, seen


def test_every_step_of_a_mixed_run_reads_images_and_videos(mixed_run) -> None:  # type: ignore[no-untyped-def]
    store, spec, results, seen = mixed_run
    release = read_release(store, "releases/mix")
    images = {split: sum(r.is_image for r in rows) for split, rows in release.items()}
    videos = {split: sum(not r.is_image for r in rows) for split, rows in release.items()}
    assert images == {"train": 6, "validation": 3, "test": 3}
    assert videos == {"train": 6, "validation": 3, "test": 3}
    # the teacher passes train and validation; Phase 2 one epoch of each modality (6 + 6);
    # the evaluation test and validation. Every image is one frame (config.frames is 4).
    assert seen["teacher"] == Counter({"video": 9, "image": 9, "image frames 1": 9})
    assert seen["phase2"] == Counter({"video": 6, "image": 6, "image frames 1": 6})
    assert seen["evaluate"] == Counter({"video": 6, "image": 6, "image frames 1": 6})
    assert results["phase2"]["samples"] == 12
    assert results["phase2"]["steps"] == 4
    assert results["phase2"]["modalities"] == {"video": 6, "image": 6}
    # the image prompt's wording is part of the teacher cache's key (a video release keeps its own)
    from training_bridge.rigel.teacher import prompt_version

    assert results["teacher"]["prompt_version"] == prompt_version(
        reference_free=False, frames=4, images=True
    )
    assert prompt_version(reference_free=False, frames=4) != results["teacher"]["prompt_version"]
    scores = store.read_bytes(spec.artifact("scores/test.jsonl")).decode().splitlines()
    scored = {json.loads(line)["candidate_id"] for line in scores}
    assert {r.candidate_id for r in release["test"]} == scored
    assert all(0.0 <= json.loads(line)["score"] <= 1.0 for line in scores)


def _records(videos: int, images: int) -> list[ReleaseRecord]:
    def record(number: int, modality: str) -> ReleaseRecord:
        return ReleaseRecord(
            clip_id=f"{modality}{number}",
            candidate_id=f"{modality}{number}",
            text="a caption",
            references=(),
            normalized=0.5,
            training_class=3,
            frames_key=f"clips/{modality}{number}/frames",
            modality=modality,
        )

    # interleaved, as a release orders them by clip
    rows = [record(n, "video") for n in range(videos)] + [record(n, "image") for n in range(images)]
    return sorted(rows, key=lambda r: (int(r.clip_id.removeprefix(r.modality)), r.modality))


def test_epoch_orders_follow_the_papers_image_and_video_epochs() -> None:
    records = _records(videos=5, images=4)
    kind = [r.modality for r in records]
    video_positions = {i for i, k in enumerate(kind) if k == "video"}
    image_positions = {i for i, k in enumerate(kind) if k == "image"}

    mixed = epoch_orders(records, RigelConfig())  # paper: 1 (image) / 1 (video), ours: mixed
    assert len(mixed) == 1 and sorted(mixed[0]) == list(range(9))

    first = epoch_orders(records, RigelConfig(phase2_modality_order="images-first"))
    assert [set(order) for order in first] == [image_positions, video_positions]
    last = epoch_orders(records, RigelConfig(phase2_modality_order="videos-first"))
    assert [set(order) for order in last] == [video_positions, image_positions]

    two_video = epoch_orders(records, RigelConfig(phase2_epochs=2, phase2_image_epochs=1))
    assert [len(order) for order in two_video] == [9, 5]
    assert set(two_video[1]) == video_positions
    no_images = epoch_orders(records, RigelConfig(phase2_image_epochs=0))
    assert [set(order) for order in no_images] == [video_positions]
    with pytest.raises(ValueError, match="phase2_modality_order"):
        RigelConfig(phase2_modality_order="alternate")


def test_a_video_only_release_trains_in_the_order_it_always_did() -> None:
    records = _records(videos=11, images=0)
    config = RigelConfig(phase2_epochs=3, phase2_image_epochs=1, seed=5)
    assert epoch_orders(records, config) == [
        data_order(11, seed=5, epoch=epoch) for epoch in range(3)
    ]


def test_release_records_carry_the_modality(tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = {"clip_id": "c", "candidate_id": "c:1", "text": "a dog", "overall": 3.0}
    older = parse_record(dict(base, frames_key="clips/c/frames"), where="old")
    assert older.modality == "video" and not older.is_image and older.image_key == ""
    image = parse_record(
        dict(base, modality="image", image_key="clips/c/image.jpg", start=None), where="new"
    )
    assert image.is_image and image.image_key == "clips/c/image.jpg" and image.start is None
    assert has_media(image)  # the display file alone is enough
    assert not has_media(parse_record(dict(base, modality="image"), where="bare"))
    # an image's image_key does not make a video record trainable
    assert not has_media(parse_record(dict(base, image_key="x.jpg"), where="video"))
    with pytest.raises(ReleaseFormatError, match="modality"):
        parse_record(dict(base, modality="audio"), where="bad")

    store = LocalStore(tmp_path)
    _mixed_release(store, "releases/m", seed=3)
    release = read_training_release(store, "releases/m")
    assert release.left_out == []  # images with their frame are kept, videos unchanged
    loader = ExampleLoader(store, frames=4)
    image_record = next(r for r in release["train"] if r.is_image)
    video_record = next(r for r in release["train"] if not r.is_image)
    image_example, video_example = loader.examples([image_record, video_record])
    assert image_example.modality == "image" and image_example.frames.shape == (1, 48, 48, 3)
    assert video_example.modality == "video" and video_example.frames.shape[0] == 4
    # without its training frame the image is read from its display file
    bare = ReleaseRecord(**{**image_record.__dict__, "frames_key": ""})
    assert loader.examples([bare])[0].frames.shape == (1, 48, 48, 3)
    lazy = ExampleLoader(store, frames=4, lazy=True).examples([image_record])[0]
    assert lazy.modality == "image" and len(lazy.frame_paths) == 1
