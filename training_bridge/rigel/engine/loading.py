"""The CPU side of the engine, run in DataLoader worker processes.

Decoding, tokenisation and the M-RoPE positions run in the workers, batches ahead of the device;
the workers get a model-free copy of the backbone (:func:`worker_backbone`) and start with one
thread per library (:data:`WORKER_ENV`), since the workers themselves are the parallelism.

No Django import.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..backbone import Backbone
from ..images import visual_target_size
from ..inputs import (
    RigelExample,
    encode_text,
    load_video,
    mm_token_type_ids,
    rope_position_ids,
    sample_reference_free,
)
from .batches import SampleItem


class ExampleDataset(torch.utils.data.Dataset):
    """One :class:`SampleItem` per example (the per-sample path)."""

    def __init__(self, examples: Sequence[RigelExample], backbone: Backbone, reference_free: bool):
        self.examples = examples
        self.reference_free = reference_free
        # What the workers need, without the model.
        self.backbone = worker_backbone(backbone)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> SampleItem:
        example = self.examples[index]
        backbone = self.backbone
        video = load_video(example, backbone.vision)
        ids, grid = encode_text(
            example,
            video,
            backbone,
            reference_free=sample_reference_free(example, self.reference_free),
        )
        types = mm_token_type_ids(ids, backbone)
        positions = rope_position_ids(types, grid, backbone.vision.merge_size)
        frames = video.frames
        size = visual_target_size(
            example.modality,
            len(frames),
            int(frames.shape[1]),
            int(frames.shape[2]),
            backbone.vision,
        )
        return SampleItem(
            frames=torch.from_numpy(np.ascontiguousarray(frames)),
            input_ids=torch.as_tensor(ids, dtype=torch.long),
            positions=torch.from_numpy(positions),
            grid=grid,
            size=size,
            index=index,
        )


# Environment the decoding workers start with: one thread per library in each worker (the workers
# are the parallelism). OpenCV's decoder threads are set per capture (video._open_capture): its
# default of one thread per core in each of 15 workers made the earlier single-process runs on the
# GPU machine crawl; with one thread per capture they ran at full speed (docs/benchmarks.md).
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OPENCV_FFMPEG_CAPTURE_OPTIONS": "threads;1",
    "TOKENIZERS_PARALLELISM": "false",
}


@contextlib.contextmanager
def worker_environment() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in WORKER_ENV}
    os.environ.update(WORKER_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def worker_init(worker_id: int) -> None:
    """One decoding thread per worker process (the workers are the parallelism)."""
    os.environ.update(WORKER_ENV)
    torch.set_num_threads(1)


def multiprocessing_context(name: str) -> Any:
    """The workers' multiprocessing context (``ScoringEngine(mp_context=...)``).

    ``fork`` (the default): workers start in well under a second (measured on the H200 machine:
    first batch after 0.7 s). Each worker runs with one thread per library (``worker_init``); the
    parent should not have used OpenMP's thread pools (benchmarks set ``OMP_NUM_THREADS=1``, as torchrun
    does). ``forkserver``: workers start from a clean server that preloads the modules below —
    immune to thread pools inherited from the parent, but each worker unpickles the dataset (the
    tokenizer) and re-imports the main module: about 10 s per loader on the H200 machine."""
    import multiprocessing

    context = multiprocessing.get_context(name)
    if name == "forkserver":
        context.set_forkserver_preload(
            [
                "torch",
                "numpy",
                "transformers.tokenization_utils_tokenizers",  # the unpickled tokenizer's class
                "training_bridge.rigel.engine",
            ]
        )
    return context


def worker_backbone(backbone: Backbone) -> Backbone:
    """What the workers need of the backbone: tokenizer, settings and ids, the model's config
    only, and none of ``extra`` (which may hold a PeftModel: its weights must not be pickled)."""
    return Backbone(**{**backbone.__dict__, "model": _ConfigOnly(backbone.model), "extra": {}})


class _ConfigOnly:
    """Stands in for the model inside workers (only its config is read there)."""

    def __init__(self, model: Any):
        self.config = model.config


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix, leaving at least one token in every sequence (the
    answer position must be in each candidate's suffix)."""
    shortest = min(len(s) for s in sequences)
    length = 0
    first = sequences[0]
    while length < shortest - 1 and all(s[length] == first[length] for s in sequences[1:]):
        length += 1
    return length


@dataclass
class GroupItem:
    prefix: SampleItem  # frames, prefix ids and positions, grid, size; index = group number
    suffix_ids: list[torch.Tensor]  # per candidate (S_k,)
    suffix_positions: list[torch.Tensor]  # per candidate (3, S_k), continuing the prefix's
    indices: list[int]  # the candidates' positions in the input list


class GroupDataset(torch.utils.data.Dataset):
    """One item per bundle of clip groups sharing a video (:func:`plan_bundles`; without
    ``bundles``, one per group): the video decoded once, every candidate tokenised, each group's
    common prefix cut. An item is the list of its groups' :class:`GroupItem`."""

    def __init__(
        self,
        examples: Sequence[RigelExample],
        groups: Sequence[Sequence[int]],
        backbone: Backbone,
        reference_free: bool,
        bundles: Sequence[Sequence[int]] | None = None,
    ):
        self.examples = examples
        self.groups = [list(g) for g in groups]
        self.bundles = (
            [list(b) for b in bundles] if bundles is not None else [[n] for n in range(len(groups))]
        )
        self.reference_free = reference_free
        self.backbone = worker_backbone(backbone)

    def __len__(self) -> int:
        return len(self.bundles)

    def __getitem__(self, number: int) -> list[GroupItem]:
        bundle = self.bundles[number]
        video = load_video(self.examples[self.groups[bundle[0]][0]], self.backbone.vision)
        return [self._group(group, video) for group in bundle]

    def _group(self, number: int, video: Any) -> GroupItem:
        backbone = self.backbone
        rows = self.groups[number]
        sequences: list[list[int]] = []
        grid: tuple[int, int, int] | None = None
        for row in rows:
            example = self.examples[row]
            free = sample_reference_free(example, self.reference_free)
            ids, grid = encode_text(example, video, backbone, reference_free=free)
            sequences.append(ids)
        assert grid is not None
        cut = common_prefix_length(sequences)
        merge = backbone.vision.merge_size
        suffix_ids, suffix_positions = [], []
        prefix_positions: np.ndarray | None = None
        for ids in sequences:
            types = mm_token_type_ids(ids, backbone)
            if types[cut:].any():
                raise ValueError("a candidate's suffix holds video tokens")
            positions = rope_position_ids(types, grid, merge)
            if prefix_positions is None:
                prefix_positions = positions[:, :cut]
            suffix_ids.append(torch.as_tensor(ids[cut:], dtype=torch.long))
            suffix_positions.append(torch.from_numpy(np.ascontiguousarray(positions[:, cut:])))
        assert prefix_positions is not None
        frames = video.frames
        size = visual_target_size(
            self.examples[rows[0]].modality,
            len(frames),
            int(frames.shape[1]),
            int(frames.shape[2]),
            backbone.vision,
        )
        prefix = SampleItem(
            frames=torch.from_numpy(np.ascontiguousarray(frames)),
            input_ids=torch.as_tensor(sequences[0][:cut], dtype=torch.long),
            positions=torch.from_numpy(np.ascontiguousarray(prefix_positions)),
            grid=grid,
            size=size,
            index=number,
        )
        return GroupItem(prefix, suffix_ids, suffix_positions, list(rows))
