"""The teacher pass and Phase 2 under torchrun (2 processes, gloo, CPU) give what one process gives,
with the same code (`python -m training_bridge.rigel.cli step ...`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load

from tests.rigel.release_support import tiny_settings, write_release
from tests.support.plain import REPO_ROOT, free_port
from training_bridge.rigel.cli import parse_event
from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.pipeline import RunSpec, run_step
from training_bridge.rigel.store import LocalStore
from training_bridge.rigel.teacher import load_split

pytestmark = pytest.mark.slow


def _spec() -> RunSpec:
    config = RigelConfig(
        backbone="tiny",
        lora_dropout=0.0,
        **tiny_settings(
            teacher_batch_size=2,
            phase2_batch_size=4,
            phase2_micro_batch_size=2,
            phase2_checkpoint_every=2,
        ),
    )
    return RunSpec(
        run_prefix="training/runs/ddp", release_prefix="releases/5", release_key="5", config=config
    )


def test_teacher_pass_and_phase2_under_torchrun_match_one_process(tmp_path: Path):
    spec = _spec()
    # One process, in this test process.
    single = LocalStore(tmp_path / "single")
    write_release(single, "releases/5", seed=5)
    results: dict = {}
    for step in ("teacher", "phase1", "phase2"):
        results[step] = run_step(step, spec=spec, store=single, results=results)

    # Two processes under torchrun, same release written to another folder.
    double = LocalStore(tmp_path / "double")
    write_release(double, "releases/5", seed=5)
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes=1", "--nproc_per_node=2", f"--master_port={free_port()}", "--master_addr=127.0.0.1",
        "-m", "training_bridge.rigel.cli", "step", "teacher", "phase1", "phase2",
        "--spec", str(tmp_path / "spec.json"), "--store", str(double.root),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    completed = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    events = [e for e in map(parse_event, completed.stdout.splitlines()) if e is not None]
    reported = {e["step"]: e["result"] for e in events if e["event"] == "result"}
    assert set(reported) == {"teacher", "phase1", "phase2"}  # rank 0 alone reports
    assert reported["teacher"]["computed"] == 20  # each sample once, over both processes
    assert reported["phase2"]["steps"] == results["phase2"]["steps"] == 3
    checkpoints = [e for e in events if e["event"] == "checkpoint"]
    assert [c["step"] for c in checkpoints] == [2]

    assert reported["phase1"]["best_epoch"] == results["phase1"]["best_epoch"]
    prefix = results["teacher"]["cache_prefix"]
    assert reported["teacher"]["cache_prefix"] == prefix
    for split in ("train", "validation"):
        one, two = load_split(single, prefix, split), load_split(double, prefix, split)
        assert two.candidate_ids == one.candidate_ids
        torch.testing.assert_close(two.hidden, one.hidden, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(two.score_logits, one.score_logits, rtol=1e-4, atol=1e-5)

    key = "training/runs/ddp/artifacts/adapter/adapter_model.safetensors"
    one_adapter, two_adapter = load(single.read_bytes(key)), load(double.read_bytes(key))
    assert set(one_adapter) == set(two_adapter)
    for name, tensor in one_adapter.items():
        torch.testing.assert_close(two_adapter[name], tensor, rtol=1e-3, atol=1e-5)
    assert reported["phase2"]["mean_loss"] == pytest.approx(
        results["phase2"]["mean_loss"], rel=1e-4
    )


@pytest.mark.parametrize("dtypes", [("bf16",) * 3, ("bf16", "fp32", "bf16")])
def test_flat_gradient_buffers_give_what_per_gradient_conversions_give(dtypes) -> None:  # type: ignore[no-untyped-def]
    """The all-reduce's flat buffer: one concatenation and one conversion each way where the
    gradients share a dtype, bit-identical to converting each gradient on its own (the earlier
    code); the gradients come back in their shapes and dtypes."""
    import torch

    from training_bridge.rigel.distributed import flat_gradient_sum_buffers

    names = {"bf16": torch.bfloat16, "fp32": torch.float32}
    torch.manual_seed(3)
    shapes = [(8, 16), (16,), (4, 2, 3)]
    grads = [torch.randn(s).to(names[d]) for s, d in zip(shapes, dtypes, strict=True)]
    flat, back = flat_gradient_sum_buffers(grads)
    assert flat.dtype == torch.float32
    expected_flat = torch.cat([g.reshape(-1).float() for g in grads])
    assert torch.equal(flat, expected_flat)
    summed = flat * 3 + 0.1  # what an all-reduce over ranks might leave
    got = back(summed)
    offset = 0
    for g, out in zip(grads, got, strict=True):
        count = g.numel()
        expected = summed[offset : offset + count].view_as(g).to(g.dtype)
        offset += count
        assert out.dtype == g.dtype and out.shape == g.shape
        assert torch.equal(out, expected)
