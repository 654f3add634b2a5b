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
