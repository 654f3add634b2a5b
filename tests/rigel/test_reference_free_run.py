"""A reference-free run trains the whole method on the reference-free prompt (issue 26, point 1):
the teacher pass caches the hidden states of the prompt without references, Phase 2 trains and
the evaluation scores on that prompt, and nothing is shared with the reference-based run of the
same release."""

from __future__ import annotations

import pytest
import torch

from tests.rigel.release_support import tiny_settings, write_release
from training_bridge.rigel import inputs
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.data import ExampleLoader, read_release
from training_bridge.rigel.pipeline import STEPS, RunSpec, load_run_model, run_step
from training_bridge.rigel.store import LocalStore
from training_bridge.rigel.teacher import answer_position_outputs, load_split


@pytest.fixture(scope="module")
def runs(tmp_path_factory):  # type: ignore[no-untyped-def]
    store = LocalStore(tmp_path_factory.mktemp("reference-free"))
    write_release(
        store, "releases/rf", clips={"train": 2, "validation": 2, "test": 1},
        candidates_per_clip=3, seed=31,
    )  # fmt: skip
    settings = tiny_settings(standard_metrics=[], phase2_batch_size=3, phase2_micro_batch_size=3)
    seen: dict[bool, dict[str, set[bool]]] = {}
    original = inputs.build_batch
    out = {}
    for free in (True, False):
        seen[free] = {}
        config = RigelConfig(backbone="tiny", reference_free=free, **settings)
        spec = RunSpec(
            run_prefix=f"runs/{'free' if free else 'based'}",
            release_prefix="releases/rf",
            release_key="rf",
            config=config,
        )
        results: dict = {}  # type: ignore[type-arg]
        for step in STEPS:
            # A spy on the one function that renders prompts into tensors: which setting each
            # step asked for (the real function runs).
            def spy(*args, step=step, free=free, **kwargs):  # type: ignore[no-untyped-def]
                seen[free].setdefault(step, set()).add(kwargs["reference_free"])
                return original(*args, **kwargs)

            inputs.build_batch = spy  # type: ignore[assignment]
            try:
                results[step] = run_step(step, spec=spec, store=store, results=results)
            finally:
                inputs.build_batch = original  # type: ignore[assignment]
        out[free] = (spec, results)
    return store, out, seen


def test_every_step_of_a_reference_free_run_reads_the_reference_free_prompt(runs):  # type: ignore[no-untyped-def]
    _, _, seen = runs
    assert seen[True] == {"teacher": {True}, "phase2": {True}, "evaluate": {True}}
    assert seen[False] == {"teacher": {False}, "phase2": {False}, "evaluate": {False}}


def test_the_teacher_cache_holds_the_reference_free_prompts_hidden_states(runs):  # type: ignore[no-untyped-def]
    store, out, _ = runs
    free_spec, free = out[True]
    _, based = out[False]
    assert free["teacher"]["prompt_version"].endswith("-free-f4")
    assert based["teacher"]["prompt_version"].endswith("-ref-f4")
    assert free["teacher"]["cache_prefix"] != based["teacher"]["cache_prefix"]
    assert free["teacher"]["computed"] == based["teacher"]["computed"] == 12  # none shared

    # The first cached training sample, recomputed here with each prompt.
    cached = load_split(store, free["teacher"]["cache_prefix"], "train")
    record = next(
        r
        for r in read_release(store, "releases/rf")["train"]
        if r.candidate_id == cached.candidate_ids[0]
    )
    assert record.references  # the release has references; the prompt leaves them out
    backbone = load_backbone("tiny", device="cpu")
    example = ExampleLoader(store, frames=4).examples([record])
    hidden = {}
    for setting in (True, False):
        batch = inputs.build_batch(example, backbone, reference_free=setting, device="cpu")
        with torch.no_grad():
            hidden[setting], _ = answer_position_outputs(backbone, batch)
    torch.testing.assert_close(torch.as_tensor(cached.hidden[0]), hidden[True][0])
    assert not torch.allclose(hidden[False][0], hidden[True][0])

    # the trained model scores with the reference-free prompt
    model = load_run_model(spec=free_spec, store=store, results=free)
    assert model.reference_free is True
    assert "test" in free["evaluate"]["metrics"]
