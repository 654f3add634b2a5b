"""One engine run over a long list, with progress per batch (issue 29 point 2: every
`engine.run` starts and fills its own decoding pipeline, so the benchmark scorer hands the engine
large chunks and reports progress per batch instead of per chunk)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.rigel.engine.test_scoring_engine import Head, _three_protocols
from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.benchmark import BenchmarkClip, ProtocolScorer, benchmark_record
from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.data import ExampleLoader
from training_bridge.rigel.engine import EngineOutput, ScoringEngine
from training_bridge.rigel.store import LocalStore


@pytest.fixture
def tiny():  # type: ignore[no-untyped-def]
    backbone = load_backbone("tiny", device="cpu", seed=1)
    yield backbone
    fused.restore()


def test_engine_reports_each_batch_and_can_leave_the_hidden_states(tiny) -> None:  # type: ignore[no-untyped-def]
    protocols, settings = _three_protocols()
    examples = []
    for group, free in zip(protocols, settings, strict=True):
        for example in group:
            example.reference_free = free
        examples.extend(group)
    examples.append(protocols[0][0].__class__(["alone ."], "alone", frames=examples[0].frames))
    head = Head(tiny.hidden_size)
    options = {"batch_size": 6, "group_loader_batch": 1, "loader_batch": 1, "num_workers": 0}
    seen: list[int] = []
    full = ScoringEngine(tiny, head, **options).run(examples)
    lean = ScoringEngine(tiny, head, **options).run(
        examples, progress=seen.append, keep_hidden=False
    )
    assert full.hidden.shape == (len(examples), tiny.hidden_size)
    assert lean.hidden.shape == (len(examples), 0)
    np.testing.assert_array_equal(lean.score_logits, full.score_logits)
    np.testing.assert_array_equal(lean.head_logits, full.head_logits)
    # one call per batch (the single sample's and the shared path's), counting up to every sample
    assert len(seen) == lean.stats["batches"] > 2
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert seen[-1] == len(examples)


class _FakeEngine:
    """Scores each example by its candidate's length and its prompt setting (its own, else the
    engine's); calls `progress` every 4 samples. Every engine's runs go to one list."""

    def __init__(self, reference_free: bool, runs: list[int]) -> None:
        self.reference_free = reference_free
        self.runs = runs

    def run(self, examples: Any, *, progress: Any = None, keep_hidden: bool = True) -> Any:
        assert keep_hidden is False  # the scorer needs only the logits
        self.runs.append(len(examples))
        logits = np.zeros((len(examples), 5), dtype=np.float32)
        for row, example in enumerate(examples):
            free = example.reference_free
            free = self.reference_free if free is None else free
            logits[row, (len(example.candidate) + free) % 5] = 4.0
        for done in range(4, len(examples), 4):
            if progress is not None:
                progress(done)
        if progress is not None:
            progress(len(examples))
        return EngineOutput(np.zeros((len(examples), 0)), logits)


@pytest.mark.parametrize("chunk", [1000, 5])
def test_scorer_runs_the_engine_once_per_chunk_and_reports_every_batch(tmp_path, chunk) -> None:  # type: ignore[no-untyped-def]
    for clip in range(4):  # the lazy loader hands the engine paths; the fake reads none
        (tmp_path / f"c{clip}.mp4").write_bytes(b"")
    runs: list[int] = []
    scorer = ProtocolScorer(
        SimpleNamespace(engine=None),
        RigelConfig(frames=2),
        ExampleLoader(LocalStore(tmp_path), frames=2, lazy=True),
        chunk_size=chunk,
        engine_factory=lambda config, samples: _FakeEngine(config.reference_free, runs),
    )
    clips = [
        BenchmarkClip(clip_id=f"c{k // 3}", video_key=f"c{k // 3}.mp4", duration=1.0)
        for k in range(12)
    ]
    texts = [f"a caption {'x' * k}" for k in range(12)]
    records = [
        benchmark_record(clip, text, ["a reference ."], f"k{n}")
        for n, (clip, text) in enumerate(zip(clips, texts, strict=True))
    ]
    seen: list[tuple[int, int]] = []
    scores = scorer.score_together(
        [(records, True), (records, False)], progress=lambda done, total: seen.append((done, total))
    )
    assert scores is not None
    # one engine run per chunk of records (both settings in each run)
    assert runs == ([24] if chunk == 1000 else [10, 10, 4])
    # progress within each run, continuing across runs, to every sample
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == 24 and {t for _, t in seen} == {24}
    assert len(seen) > len(runs)
    # each setting's scores, in record order, as one setting at a time gives them
    assert scores[0].shape == scores[1].shape == (12,)
    assert np.abs(scores[0] - scores[1]).min() > 0.1
    for number, free in enumerate((True, False)):
        np.testing.assert_allclose(scorer.score(records, reference_free=free), scores[number])
