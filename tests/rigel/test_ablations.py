"""The ablation switches of the paper's Tables 3 and 5 on the tiny backbone: each run differs from
the full method only in what its switch names (same settings otherwise, same teacher cache, same
Phase 1 head where Phase 1 runs alike)."""

from __future__ import annotations

import pytest
import torch

from tests.rigel.release_support import tiny_settings, write_release
from training_bridge.rigel.config import Ablation, RigelConfig
from training_bridge.rigel.head import build_head, head_from_bytes
from training_bridge.rigel.pipeline import STEPS, RunSpec, load_run_model, run_step
from training_bridge.rigel.store import LocalStore


def _head_state(store: LocalStore, key: str) -> dict[str, torch.Tensor]:
    return head_from_bytes(store.read_bytes(key)).state_dict()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):  # type: ignore[no-untyped-def]
    store = LocalStore(tmp_path_factory.mktemp("ablations"))
    write_release(
        store, "releases/ab", clips={"train": 2, "validation": 2, "test": 1},
        candidates_per_clip=3, seed=21,
    )  # fmt: skip
    settings = tiny_settings(standard_metrics=[], phase2_batch_size=3, phase2_micro_batch_size=3)
    out = {}
    for ablation in ("full", "lm-head", "no-phase2", "random-head", "kl-loss"):
        config = RigelConfig(backbone="tiny", ablation=ablation, **settings)
        spec = RunSpec(
            run_prefix=f"runs/{ablation}",
            release_prefix="releases/ab",
            release_key="ab",
            config=config,
        )
        results: dict = {}  # type: ignore[type-arg]
        for step in STEPS:
            results[step] = run_step(step, spec=spec, store=store, results=results)
        out[ablation] = (spec, results)
    return store, out


def test_each_switch_changes_only_the_ablation_setting(runs):  # type: ignore[no-untyped-def]
    _, out = runs
    full = out["full"][0].config.to_dict()
    for name, (spec, _) in out.items():
        differing = {k for k, v in spec.config.to_dict().items() if full[k] != v}
        assert differing == (set() if name == "full" else {"ablation"}), name
    assert out["no-phase2"][0].config.ablation == Ablation.PHASE1_ONLY


def test_lm_head_trains_and_scores_through_the_teachers_score_tokens(runs):  # type: ignore[no-untyped-def]
    store, out = runs
    spec, results = out["lm-head"]
    assert results["teacher"] == {"skipped": True} and results["phase1"] == {"skipped": True}
    assert results["phase2"]["head_key"] is None and results["phase2"]["steps"] >= 1
    model = load_run_model(spec=spec, store=store, results=results)
    assert model.head is None  # scores come from the LM head's logits of "1".."5"
    assert "test" in results["evaluate"]["metrics"]


def test_no_phase2_keeps_the_full_methods_phase1_head_and_trains_no_adapter(runs):  # type: ignore[no-untyped-def]
    store, out = runs
    _, full = out["full"]
    spec, results = out["no-phase2"]
    assert results["phase2"] == {"skipped": True}
    assert not store.list_keys(spec.artifact("adapter"))
    # the same teacher cache and the same Phase 1: the very same head as the full run's
    assert results["teacher"]["cache_prefix"] == full["teacher"]["cache_prefix"]
    assert results["teacher"]["computed"] == 0
    assert _same(
        _head_state(store, results["phase1"]["head_key"]),
        _head_state(store, full["phase1"]["head_key"]),
    )


def test_random_head_skips_phase1_and_trains_phase2_under_a_fresh_head(runs):  # type: ignore[no-untyped-def]
    store, out = runs
    _, full = out["full"]
    spec, results = out["random-head"]
    assert results["teacher"] == {"skipped": True} and results["phase1"] == {"skipped": True}
    stored = _head_state(store, results["phase2"]["head_key"])
    fresh = build_head(stored["net.0.weight"].shape[1], seed=spec.config.seed).state_dict()
    assert _same(stored, fresh)  # randomly initialised and never trained (frozen in Phase 2)
    assert not _same(stored, _head_state(store, full["phase1"]["head_key"]))
    assert store.list_keys(spec.artifact("adapter"))


def test_kl_loss_changes_only_phase1s_objective(runs):  # type: ignore[no-untyped-def]
    store, out = runs
    _, full = out["full"]
    _, results = out["kl-loss"]
    assert (full["phase1"]["objective"], results["phase1"]["objective"]) == ("emd", "kl")
    assert results["teacher"]["cache_prefix"] == full["teacher"]["cache_prefix"]
    assert results["teacher"]["computed"] == 0  # the full run's teacher pass, reused
    assert not _same(
        _head_state(store, results["phase1"]["head_key"]),
        _head_state(store, full["phase1"]["head_key"]),
    )
    assert results["phase2"]["head_key"] == results["phase1"]["head_key"]
    assert results["phase2"]["steps"] == full["phase2"]["steps"]
