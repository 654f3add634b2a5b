"""The fast inference engine (used on CUDA) inside the teacher pass and the evaluation gives the
numbers of the plain batch path, here forced on for the tiny model on CPU (no worker processes)."""

from __future__ import annotations

import json

import torch

from tests.rigel.release_support import tiny_settings, write_release
from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.pipeline import RunSpec, run_step
from training_bridge.rigel.store import LocalStore
from training_bridge.rigel.teacher import load_split


def _run(root, engine: str) -> tuple[LocalStore, dict]:  # type: ignore[no-untyped-def]
    store = LocalStore(root)
    write_release(store, "releases/4", clips={"train": 2, "validation": 2}, seed=4)
    config = RigelConfig(
        backbone="tiny",
        ablation="phase1_only",
        engine=engine,
        engine_workers=0,
        **tiny_settings(standard_metrics=[]),
    )
    spec = RunSpec(
        run_prefix="training/runs/x", release_prefix="releases/4", release_key="4", config=config
    )
    results: dict = {}
    for step in ("teacher", "phase1", "evaluate"):
        results[step] = run_step(step, spec=spec, store=store, results=results)
    return store, results


def test_the_engine_path_matches_the_plain_path(tmp_path, monkeypatch):
    from training_bridge.rigel.engine import ScoringEngine

    calls: list[int] = []
    original = ScoringEngine.run

    def counting(self, examples):  # type: ignore[no-untyped-def]
        calls.append(len(examples))
        return original(self, examples)

    monkeypatch.setattr(ScoringEngine, "run", counting)
    plain_store, plain = _run(tmp_path / "plain", "off")
    assert calls == []
    fast_store, fast = _run(tmp_path / "fast", "on")
    # Teacher: 8 train samples in one shard, 8 validation in one; evaluation: one batch of 8.
    assert calls == [8, 8, 8]
    prefix = plain["teacher"]["cache_prefix"]
    assert fast["teacher"]["cache_prefix"] == prefix and fast["teacher"]["computed"] == 16
    for split in ("train", "validation"):
        one, two = load_split(plain_store, prefix, split), load_split(fast_store, prefix, split)
        assert two.candidate_ids == one.candidate_ids
        torch.testing.assert_close(two.hidden.float(), one.hidden.float(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(two.score_logits, one.score_logits, rtol=1e-4, atol=1e-4)

    def scores(store: LocalStore) -> list[float]:
        lines = store.read_bytes("training/runs/x/artifacts/scores/validation.jsonl").decode()
        return [json.loads(line)["score"] for line in lines.splitlines()]

    assert torch.allclose(
        torch.tensor(scores(fast_store)), torch.tensor(scores(plain_store)), atol=1e-4
    )
