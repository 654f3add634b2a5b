"""Scoring a benchmark's candidates with a trained run under the paper's protocols (Table 2).

The protocols differ only in the references the prompt carries:

- ``reference-free``: none (the reference-free prompt);
- ``1-ref``: the clip's first reference;
- ``all-refs``: every reference of the clip (nine on VATEX-EVAL: the paper's "9-ref").

The scorer itself takes either prompt setting; which run may be scored under which protocol is the
caller's rule (the Django side scores each protocol with runs trained in its setting, as the paper
gives each setting its own prompt, and refuses or labels a mismatch). On CUDA the scores come from
``ScoringEngine`` (through its public constructor and ``run``), one engine per prompt setting, fed
in chunks so that progress can be reported; on CPU from the model's own batched forward.

Correlations are not computed here: the caller hands the scores to
``training_bridge.metrics.benchmark.correlation_row``, the code ``evaluate_metrics`` uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.data import ExampleLoader, ReleaseRecord
from training_bridge.rigel.modality import VIDEO

REFERENCE_FREE = "reference-free"
ONE_REF = "1-ref"
ALL_REFS = "all-refs"
PROTOCOLS = (REFERENCE_FREE, ONE_REF, ALL_REFS)
FOIL = "foil"

# Table 2 of the paper (seed 000), Rigel ("Ours", Qwen3-VL-2B) on VATEX-EVAL: (Kendall tau_b,
# Spearman rho) x100 per protocol, and ActivityNet-FOIL accuracy (%). The target a run with real
# weights trained on Vid-Lepus should approach; nothing in this repository reproduces them.
PAPER_VATEX_EVAL = {REFERENCE_FREE: (42.1, 53.7), ONE_REF: (45.6, 57.8), ALL_REFS: (50.8, 64.0)}
PAPER_FOIL_ACCURACY = {REFERENCE_FREE: 96.2, "reference-based": 97.1}

Progress = Callable[[int, int], None]  # (samples done, samples in all)


def protocol_references(references: Sequence[str], protocol: str) -> list[str]:
    """The references the prompt carries under `protocol`."""
    if protocol == REFERENCE_FREE:
        return []
    if protocol == ONE_REF:
        return list(references[:1])
    if protocol == ALL_REFS:
        return list(references)
    raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")


@dataclass(frozen=True)
class BenchmarkClip:
    """Where a clip's (or a still image's) pixels are in the store."""

    clip_id: str
    frames_key: str = ""
    video_key: str = ""
    duration: float | None = None
    modality: str = VIDEO  # or IMAGE: one frame (T = 1), through the image path
    image_key: str = ""


def benchmark_record(
    clip: BenchmarkClip, text: str, references: Sequence[str], key: str
) -> ReleaseRecord:
    """A scoring input in the shape the example loader reads (no human score needed)."""
    return ReleaseRecord(
        clip_id=clip.clip_id,
        candidate_id=key,
        text=text,
        references=tuple(references),
        normalized=0.0,
        training_class=1,
        frames_key=clip.frames_key,
        video_key=clip.video_key,
        duration=clip.duration,
        modality=clip.modality,
        image_key=clip.image_key,
    )


class ProtocolScorer:
    """Scores records with a trained model (`training_bridge.rigel.scoring.TrainedRigel`) in either
    prompt setting. Records should come grouped by clip (the loader keeps recent clips decoded;
    the engine shares a clip's prefix among its candidates).

    With an engine, ``chunk_size`` records (per prompt setting) go to one ``engine.run``: each
    run starts and fills its own decoding pipeline (about 1.4 s on an H200 with 15 decoding
    processes, during which the GPU waits), so chunks are large and progress is reported per
    engine batch rather than per chunk; the chunk only bounds the examples held at once."""

    def __init__(
        self,
        model: Any,
        config: RigelConfig,
        loader: ExampleLoader,
        *,
        chunk_size: int = 16384,
        engine_factory: Callable[[RigelConfig, int], Any] | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.loader = loader
        self.chunk_size = max(1, chunk_size)
        self.engine_factory = engine_factory
        self._engines: dict[bool, Any] = {}
        # The engine comes per prompt setting, made at first use for the number of samples it
        # will score (`engine_compile` "auto" compiles for a long pass); the model's own engine,
        # made without that knowledge, is not used.
        device_type = getattr(getattr(model, "backbone", None), "device", None)
        self.uses_engine = engine_factory is not None or (
            device_type is not None and config.uses_engine(device_type.type)
        )
        if getattr(model, "engine", None) is not None:
            model.engine.close()
            model.engine = None

    def _engine(self, reference_free: bool, samples: int) -> Any | None:
        if not self.uses_engine:
            return None
        if reference_free not in self._engines:
            config = replace(self.config, reference_free=reference_free)
            if self.engine_factory is not None:
                self._engines[reference_free] = self.engine_factory(config, samples)
            else:
                from training_bridge.rigel.pipeline import make_engine

                self._engines[reference_free] = make_engine(
                    self.model.backbone,
                    config,
                    head=self.model.head,
                    batch_size=self.config.eval_batch_size,
                    samples=samples,
                )
        return self._engines[reference_free]

    def score(
        self,
        records: Sequence[ReleaseRecord],
        *,
        reference_free: bool,
        progress: Progress | None = None,
        offset: int = 0,
        total: int | None = None,
    ) -> np.ndarray:
        """Normalised scores in [0, 1], one per record, in order."""
        import torch

        from training_bridge.rigel.scoring import normalised_score

        total = len(records) if total is None else total
        engine = self._engine(reference_free, total)
        parts: list[np.ndarray] = []
        size = self.chunk_size if engine is not None else self.config.eval_batch_size
        for start in range(0, len(records), size):
            chunk = records[start : start + size]
            examples = self.loader.examples(chunk)
            if engine is not None:
                output = engine.run(
                    examples,
                    progress=_batch_progress(progress, offset + start, total),
                    keep_hidden=False,
                )
                logits = (
                    output.head_logits if output.head_logits is not None else output.score_logits
                )
                parts.append(normalised_score(torch.from_numpy(logits)).double().numpy())
            else:
                saved = self.model.reference_free
                self.model.reference_free = reference_free
                try:
                    parts.append(self.model.score(examples, batch_size=len(chunk)))
                finally:
                    self.model.reference_free = saved
            if progress is not None:
                progress(offset + start + len(chunk), total)
        return np.concatenate(parts) if parts else np.zeros(0)

    def score_together(
        self,
        settings: Sequence[tuple[Sequence[ReleaseRecord], bool]],
        *,
        progress: Progress | None = None,
        offset: int = 0,
        total: int | None = None,
    ) -> list[np.ndarray] | None:
        """Scores of several lists of records, one prompt setting each (``(records,
        reference_free)``), the lists parallel (record i of each on the same clip), in ONE engine
        pass per chunk: each sample carries its own setting, so a clip is decoded and goes
        through the vision tower once for all the lists (the engine's bundles). ``None`` when
        no engine scores here (CPU): the caller scores each list alone."""
        import torch

        from training_bridge.rigel.scoring import normalised_score

        lengths = {len(records) for records, _ in settings}
        if len(lengths) != 1:
            raise ValueError("the record lists must be parallel (the same length)")
        (length,) = lengths
        total = length * len(settings) if total is None else total
        # one engine; every example says its own setting, so its default does not matter
        engine = self._engine(False, total)
        if engine is None:
            return None
        parts: list[list[np.ndarray]] = [[] for _ in settings]
        done = 0
        for start in range(0, length, self.chunk_size):
            examples = []
            for records, free in settings:
                chunk = self.loader.examples(records[start : start + self.chunk_size])
                for example in chunk:
                    example.reference_free = free
                examples.extend(chunk)
            output = engine.run(
                examples,
                progress=_batch_progress(progress, offset + done, total),
                keep_hidden=False,
            )
            logits = output.head_logits if output.head_logits is not None else output.score_logits
            scores = normalised_score(torch.from_numpy(logits)).double().numpy()
            size = len(examples) // len(settings)
            for number in range(len(settings)):
                parts[number].append(scores[number * size : (number + 1) * size])
            done += len(examples)
            if progress is not None:
                progress(offset + done, total)
        return [np.concatenate(p) if p else np.zeros(0) for p in parts]

    def close(self) -> None:
        for engine in self._engines.values():
            close = getattr(engine, "close", None)
            if close is not None:
                close()
        self._engines.clear()


def _batch_progress(
    progress: Progress | None, before: int, total: int
) -> Callable[[int], None] | None:
    """The engine's per-batch count (samples done in this run) as the caller's progress."""
    if progress is None:
        return None
    return lambda done: progress(before + done, total)


def score_protocols(
    scorer: ProtocolScorer,
    *,
    clips: Sequence[BenchmarkClip],
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    protocols: Sequence[str],
    progress: Progress | None = None,
    together: bool = False,
) -> dict[str, np.ndarray]:
    """{protocol: scores of every candidate}; candidate i is on clip `clips[i]` with the clip's
    references `references[i]` (all of them; each protocol keeps its own). ``together``: the
    protocols in one engine pass (:meth:`ProtocolScorer.score_together`: each clip decoded and
    through the vision tower once for all of them), where an engine scores; the same scores."""
    if not len(clips) == len(candidates) == len(references):
        raise ValueError("clips, candidates and references must have the same length")
    total = len(candidates) * len(protocols)
    by_protocol = {
        protocol: [
            benchmark_record(clip, text, protocol_references(refs, protocol), str(index))
            for index, (clip, text, refs) in enumerate(
                zip(clips, candidates, references, strict=True)
            )
        ]
        for protocol in protocols
    }
    if together and len(protocols) > 1:
        fused = scorer.score_together(
            [(by_protocol[p], p == REFERENCE_FREE) for p in protocols],
            progress=progress,
            total=total,
        )
        if fused is not None:
            return dict(zip(protocols, fused, strict=True))
    scores: dict[str, np.ndarray] = {}
    for number, protocol in enumerate(protocols):
        records = by_protocol[protocol]
        scores[protocol] = scorer.score(
            records,
            reference_free=protocol == REFERENCE_FREE,
            progress=progress,
            offset=number * len(candidates),
            total=total,
        )
    return scores
