"""Reading a Vid-Lepus release (the `export` app's files) for training.

A release lives under a storage prefix with one JSONL file per split: `data/train.jsonl`,
`data/validation.jsonl` and optionally `data/test.jsonl`. Each line is one candidate caption with its
clip, references and aggregated human scores. This module is the only place that knows the field
names, so a change of the export format is absorbed here.

A record's ``modality`` is "video" (the default, also for releases older than the field) or
"image": a still image, whose ``frames_key`` holds its one training frame (``000.jpg``, T = 1) and
``image_key`` its display file; an image has no start, end or duration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from training_bridge.rigel.modality import IMAGE, MODALITIES, VIDEO
from training_bridge.rigel.store import Store

SPLITS = ("train", "validation", "test")
REQUIRED_SPLITS = ("train", "validation")


class ReleaseFormatError(ValueError):
    """A release file is missing or a record lacks a field training needs."""


@dataclass(frozen=True)
class ReleaseRecord:
    """One candidate caption of a release, as training needs it."""

    clip_id: str
    candidate_id: str
    text: str
    references: tuple[str, ...]
    normalized: float  # human overall score mapped to [0, 1] by (overall - 1) / 4
    training_class: int  # 1..5, the rounded overall score
    overall: float | None = None
    video_key: str = ""
    frames_key: str = ""
    start: float | None = None
    end: float | None = None
    duration: float | None = None
    system: str = ""
    system_version: str = ""
    scores: dict[str, float] = field(default_factory=dict)
    modality: str = VIDEO  # or IMAGE (a still image, T = 1)
    image_key: str = ""

    @property
    def is_image(self) -> bool:
        return self.modality == IMAGE

    @property
    def class_index(self) -> int:
        """The one-hot target index of Phase 2 (class 1..5 -> 0..4)."""
        return self.training_class - 1


def split_key(prefix: str, split: str) -> str:
    return f"{prefix.rstrip('/')}/data/{split}.jsonl"


def available_splits(store: Store, prefix: str) -> list[str]:
    return [split for split in SPLITS if store.exists(split_key(prefix, split))]


def parse_record(raw: dict[str, Any], *, where: str) -> ReleaseRecord:
    """Build a record from one JSON object of a release file; errors name the file and line."""

    def need(*names: str) -> Any:
        for name in names:
            if name in raw and raw[name] is not None:
                return raw[name]
        raise ReleaseFormatError(f"{where}: missing field {names[0]!r}")

    overall = raw.get("overall")
    overall_value = float(overall) if overall is not None else None
    if "normalized" in raw or "normalised" in raw:
        normalized = float(need("normalized", "normalised"))
    elif overall_value is not None:
        normalized = (overall_value - 1.0) / 4.0
    else:
        raise ReleaseFormatError(f"{where}: missing field 'normalized'")
    if not (0.0 <= normalized <= 1.0) or math.isnan(normalized):
        raise ReleaseFormatError(f"{where}: normalized score {normalized} is outside [0, 1]")
    if raw.get("training_class") is not None:
        training_class = int(raw["training_class"])
    elif overall_value is not None:
        training_class = int(min(5, max(1, math.floor(overall_value + 0.5))))
    else:
        raise ReleaseFormatError(f"{where}: missing field 'training_class'")
    if not 1 <= training_class <= 5:
        raise ReleaseFormatError(f"{where}: training_class {training_class} is not in 1..5")
    references = raw.get("references") or []
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise ReleaseFormatError(f"{where}: references must be a list of strings")
    text = need("text", "candidate")
    if not isinstance(text, str) or not text.strip():
        raise ReleaseFormatError(f"{where}: candidate text is empty")
    scores = raw.get("scores") or {}
    modality = str(raw.get("modality") or VIDEO)
    if modality not in MODALITIES:
        raise ReleaseFormatError(f"{where}: modality {modality!r} is neither 'video' nor 'image'")
    return ReleaseRecord(
        clip_id=str(need("clip_id")),
        candidate_id=str(need("candidate_id")),
        text=text,
        references=tuple(references),
        normalized=normalized,
        training_class=training_class,
        overall=overall_value,
        video_key=str(raw.get("video_key") or ""),
        frames_key=str(raw.get("frames_key") or ""),
        start=_optional_float(raw.get("start")),
        end=_optional_float(raw.get("end")),
        duration=_optional_float(raw.get("duration")),
        system=str(raw.get("system") or ""),
        system_version=str(raw.get("system_version") or ""),
        scores={str(k): float(v) for k, v in scores.items() if v is not None},
        modality=modality,
        image_key=str(raw.get("image_key") or "") if modality == IMAGE else "",
    )


def _optional_float(value: Any) -> float | None:
    return None if value is None or value == "" else float(value)


def parse_lines(lines: Iterable[str], *, name: str) -> Iterator[ReleaseRecord]:
    for where, raw in json_objects(lines, f"{name}, line", ReleaseFormatError):
        yield parse_record(raw, where=where)


def json_objects(
    lines: Iterable[str],
    label: str,
    error: type[ValueError],
    *,
    expected: str = "a JSON object",
    max_bytes: int | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The objects of a JSON Lines file with where each stands (`label` and the line number);
    blank lines skipped, anything else that is not an object (or a line over `max_bytes`, blank
    or not) refused with `error`."""
    for number, line in enumerate(lines, start=1):
        place = f"{label} {number}"
        if max_bytes is not None and len(line.encode("utf-8")) > max_bytes:
            raise error(f"{place}: longer than {max_bytes} bytes")
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as failure:
            raise error(f"{place}: not JSON ({failure.msg})") from failure
        if not isinstance(raw, dict):
            raise error(f"{place}: expected {expected}")
        yield place, raw


def read_split(store: Store, prefix: str, split: str) -> list[ReleaseRecord]:
    key = split_key(prefix, split)
    if not store.exists(key):
        raise ReleaseFormatError(f"release file {key} does not exist")
    text = store.read_bytes(key).decode("utf-8")
    return list(parse_lines(text.splitlines(), name=key))


def read_release(store: Store, prefix: str) -> dict[str, list[ReleaseRecord]]:
    """Every split present; train and validation are required."""
    splits = available_splits(store, prefix)
    missing = [split for split in REQUIRED_SPLITS if split not in splits]
    if missing:
        raise ReleaseFormatError(
            f"release at {prefix} lacks {', '.join(split_key(prefix, s) for s in missing)}"
        )
    return {split: read_split(store, prefix, split) for split in splits}


@dataclass(frozen=True)
class LeftOut:
    """The candidates of one split that training leaves out because their clip has no video."""

    split: str
    candidates: int
    clips: int
    kept: int


@dataclass(frozen=True)
class TrainingRelease:
    """The splits of a release as training sees them: only candidates whose clip has frames or a
    video (a release may mix clips without one, e.g. an imported VATEX-EVAL slice, whose scores
    are useful to a benchmark but give a video model nothing to look at)."""

    splits: dict[str, list[ReleaseRecord]]
    left_out: list[LeftOut]

    def __getitem__(self, split: str) -> list[ReleaseRecord]:
        return self.splits[split]

    def __contains__(self, split: object) -> bool:
        return split in self.splits

    def describe_left_out(self) -> str:
        """One sentence for the run's log ("" when nothing was left out)."""
        if not self.left_out:
            return ""
        parts = [
            f"{entry.candidates} of {entry.candidates + entry.kept} candidates "
            f"({entry.clips} clips) of {entry.split}"
            for entry in self.left_out
        ]
        return "Left out " + ", ".join(parts) + ": their clips have no video."

    def left_out_dict(self) -> dict[str, dict[str, int]]:
        return {
            entry.split: {"candidates": entry.candidates, "clips": entry.clips}
            for entry in self.left_out
        }


def has_media(record: ReleaseRecord) -> bool:
    """Whether training has pixels for the record: a clip's frames or video, an image's frame or
    image file."""
    if record.is_image:
        return bool(record.frames_key or record.image_key)
    return bool(record.frames_key or record.video_key)


def read_training_release(store: Store, prefix: str) -> TrainingRelease:
    """`read_release` less the candidates whose clip has neither frames nor a video. Refuses a
    release left with no candidate in a required split (train, validation), naming why; an
    optional split (test) left empty is dropped, as if the release had none."""
    splits: dict[str, list[ReleaseRecord]] = {}
    left_out: list[LeftOut] = []
    for split, records in read_release(store, prefix).items():
        kept = [record for record in records if has_media(record)]
        dropped = [record for record in records if not has_media(record)]
        if dropped:
            left_out.append(
                LeftOut(
                    split=split,
                    candidates=len(dropped),
                    clips=len({record.clip_id for record in dropped}),
                    kept=len(kept),
                )
            )
        if kept or split in REQUIRED_SPLITS:
            splits[split] = kept
    for split in REQUIRED_SPLITS:
        if not splits[split]:
            dropped_count = next(
                (entry.candidates for entry in left_out if entry.split == split), 0
            )
            raise ReleaseFormatError(
                f"release at {prefix} has no candidate with a video in its {split} split"
                + (
                    f": the clips of its {dropped_count} candidates have no video"
                    if dropped_count
                    else ""
                )
            )
    return TrainingRelease(splits=splits, left_out=left_out)


def frame_keys(store: Store, record: ReleaseRecord) -> list[str]:
    """The sampled JPEG frames of a record's clip (`<frames_key>/000.jpg`, ...), in order."""
    if not record.frames_key:
        return []
    prefix = record.frames_key.rstrip("/")
    return [
        key for key in store.list_keys(prefix) if key.lower().endswith((".jpg", ".jpeg", ".png"))
    ]


def _decode_image(data: bytes) -> Any:
    import io

    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def even_subset(count: int, wanted: int) -> list[int]:
    """`wanted` positions spread evenly over `count` (all of them when there are fewer)."""
    if count <= wanted:
        return list(range(count))
    step = count / wanted
    return [min(count - 1, int(step * (i + 0.5))) for i in range(wanted)]


class ExampleLoader:
    """Turns release records into the backbone's `RigelExample`s, reading frames from the store.

    Frames come from the clip's sampled JPEGs (`frames_key`) or, failing that, are decoded from
    the MP4 (`video_key`). Many candidates share a clip, so the decoded frames of the most recent
    clips are kept (a small LRU), and only the batch at hand is ever decoded: memory does not grow
    with the size of the release.
    """

    def __init__(
        self, store: Store, *, frames: int, keep_clips: int = 64, lazy: bool = False
    ) -> None:
        from collections import OrderedDict

        self.store = store
        self.frames = frames
        self.keep_clips = keep_clips
        # Lazy: hand out file paths (decoded later, e.g. in the engine's worker processes) when
        # the store has the files on local disk; decoded frames otherwise.
        self.lazy = lazy
        self._clips: OrderedDict[str, tuple[Any, list[int], float | None]] = OrderedDict()

    def clip_video(self, record: ReleaseRecord) -> tuple[Any, list[int], float | None]:
        """(frames uint8 [T, H, W, 3], source frame indices, fps) of the record's clip."""
        cache_key = record.frames_key or record.video_key or record.clip_id
        cached = self._clips.get(cache_key)
        if cached is not None:
            self._clips.move_to_end(cache_key)
            return cached
        video = self._load(record)
        self._clips[cache_key] = video
        while len(self._clips) > self.keep_clips:
            self._clips.popitem(last=False)
        return video

    def _load(self, record: ReleaseRecord) -> tuple[Any, list[int], float | None]:
        import numpy as np

        keys = frame_keys(self.store, record)
        if record.is_image:  # one frame (T = 1): the stored training frame, else the image file
            key = keys[0] if keys else record.image_key
            if not key:
                raise ReleaseFormatError(
                    f"candidate {record.candidate_id}: image {record.clip_id} has no file"
                )
            return np.stack([_decode_image(self.store.read_bytes(key))]), [0], None
        if keys:
            chosen = even_subset(len(keys), self.frames)
            frames = np.stack([_decode_image(self.store.read_bytes(keys[i])) for i in chosen])
            # The ingest pipeline samples its frames evenly over the clip: frame i of n sits at
            # (i + 0.5) / n of the duration; as "source indices" at n / duration fps that is i.
            fps = len(keys) / record.duration if record.duration else None
            return frames, chosen, fps
        if record.video_key:
            from training_bridge.rigel.video import decode_video

            with self.store.local_copy(record.video_key) as path:
                decoded = decode_video(path, self.frames)
            return decoded.frames, [int(i) for i in decoded.indices], float(decoded.fps)
        raise ReleaseFormatError(
            f"candidate {record.candidate_id}: clip {record.clip_id} has neither frames nor video"
        )

    def lazy_example(self, record: ReleaseRecord) -> Any | None:
        """An example pointing at the clip's files on local disk, or None if they are not."""
        from training_bridge.rigel.inputs import RigelExample

        local_path = getattr(self.store, "local_path", None)
        if local_path is None:
            return None
        keys = frame_keys(self.store, record)
        meta = {"candidate_id": record.candidate_id, "clip_id": record.clip_id}
        if record.is_image:
            key = keys[0] if keys else record.image_key
            image_path = local_path(key) if key else None
            if image_path is None:
                return None
            return RigelExample(
                references=list(record.references),
                candidate=record.text,
                frame_paths=[image_path],
                frame_indices=[0],
                meta=meta,
                modality=IMAGE,
            )
        if keys:
            chosen = even_subset(len(keys), self.frames)
            paths = [local_path(keys[i]) for i in chosen]
            if any(path is None for path in paths):
                return None
            return RigelExample(
                references=list(record.references),
                candidate=record.text,
                frame_paths=paths,
                frame_indices=chosen,
                fps=len(keys) / record.duration if record.duration else None,
                meta=meta,
            )
        path = local_path(record.video_key) if record.video_key else None
        if path is None:
            return None
        return RigelExample(
            references=list(record.references), candidate=record.text, video_path=path, meta=meta
        )

    def examples(self, records: Iterable[ReleaseRecord]) -> list[Any]:
        from training_bridge.rigel.inputs import RigelExample

        built = []
        for record in records:
            if self.lazy:
                example = self.lazy_example(record)
                if example is not None:
                    built.append(example)
                    continue
            frames, indices, fps = self.clip_video(record)
            built.append(
                RigelExample(
                    references=list(record.references),
                    candidate=record.text,
                    frames=frames,
                    frame_indices=list(indices),
                    fps=fps,
                    meta={"candidate_id": record.candidate_id, "clip_id": record.clip_id},
                    modality=record.modality,
                )
            )
        return built
