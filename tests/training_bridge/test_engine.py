"""ScoringEngine: same numbers as build_batch + the model's own forward, on the tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.engine import (
    ScoringEngine,
    _uniform_chunk_attention,
    expected_score,
    forward_flops,
)
from training_bridge.rigel.inputs import RigelExample, build_batch


@pytest.fixture
def tiny():  # type: ignore[no-untyped-def]
    backbone = load_backbone("tiny", device="cpu", seed=1)
    yield backbone
    fused.restore()


def _examples(n: int = 5) -> list[RigelExample]:
    rng = np.random.default_rng(11)
    shapes = [(8, 64, 64), (8, 64, 96), (6, 64, 64), (8, 64, 64), (5, 48, 80)]
    return [
        RigelExample(
            references=["a man throws a ball ."] * (k + 1),
            candidate="a man " * (k + 2),
            frames=rng.integers(0, 256, (*shapes[k % 5], 3), dtype=np.uint8),
        )
        for k in range(n)
    ]


class Head(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(hidden, 5)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden)


@pytest.mark.parametrize("workers", [0, 2])
def test_engine_matches_the_model_forward(tiny, workers: int) -> None:  # type: ignore[no-untyped-def]
    examples = _examples()
    with torch.no_grad():
        reference = []
        for example in examples:
            out = tiny.model(
                **build_batch([example], tiny, reference_free=False), output_hidden_states=True
            )
            reference.append(
                (out.hidden_states[-1][0, -1], out.logits[0, -1, tiny.score_token_ids])
            )
    head = Head(tiny.hidden_size)
    # batch 4 from worker batches of 2: merged batches with several frame shapes, right padding
    engine = ScoringEngine(tiny, head, batch_size=4, loader_batch=2, num_workers=workers)
    result = engine.run(examples)
    hidden = torch.stack([h for h, _ in reference])
    logits = torch.stack([s for _, s in reference])
    assert np.allclose(result.hidden, hidden.numpy(), atol=1e-4)
    assert np.allclose(result.score_logits, logits.numpy(), atol=1e-4)
    with torch.no_grad():
        expected = expected_score(head(hidden)).numpy()
    assert np.allclose(result.scores, expected, atol=1e-5)
    assert result.stats["batches"] == 2
    assert ((result.scores >= 0) & (result.scores <= 1)).all()


def test_score_videos_from_files(tiny, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil
    import subprocess

    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed")
    path = tmp_path / "clip.mp4"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=64x64:rate=8:duration=2",
         "-pix_fmt", "yuv420p", "-c:v", "libx264", str(path)],
        check=True,
    )  # fmt: skip
    engine = ScoringEngine(tiny, None, batch_size=2, num_workers=0)
    scores = engine.score_videos([path, path], [["a test pattern ."], ["colours ."]], ["a", "b"])
    assert scores.shape == (2,) and ((scores >= 0) & (scores <= 1)).all()
    assert scores[0] != scores[1]


def test_expected_score_is_normalised() -> None:
    logits = torch.full((3, 5), -1e9)
    logits[0, 0] = logits[1, 4] = 0.0
    logits[2] = 0.0
    assert expected_score(logits).tolist() == pytest.approx([0.0, 1.0, 0.5])


def test_uniform_chunk_attention_equals_per_chunk_sdpa() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 12, 8) for _ in range(3))
    cu = torch.tensor([0, 4, 8, 12])
    out, _ = _uniform_chunk_attention(None, q, k, v, scaling=0.3, cu_seq_lens_q=cu)
    ragged, _ = _uniform_chunk_attention(
        None, q, k, v, scaling=0.3, cu_seq_lens_q=torch.tensor([0, 5, 12])
    )
    for a, b, expected_out in ((0, 4, out), (4, 8, out), (0, 5, ragged), (5, 12, ragged)):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], scale=0.3
        )
        assert torch.allclose(expected_out[0, a:b], ref[0].transpose(0, 1), atol=1e-6)


def test_linear_patch_embed_equals_the_convolution(tiny) -> None:  # type: ignore[no-untyped-def]
    embed = tiny.model.model.visual.patch_embed
    x = torch.randn(10, 3 * 2 * 16 * 16)
    with torch.no_grad():
        conv = embed(x)
        fused.linear_patch_embed()
        linear = embed(x)
    assert torch.allclose(conv, linear, atol=1e-5)


def test_forward_flops_counts_the_2b_workload() -> None:
    from training_bridge.rigel.backbone import qwen3_vl_2b_config

    flops = forward_flops(qwen3_vl_2b_config(), seq_len=944, patches=1936, chunk=484)
    # language model: 2 * 1.41e9 matmul weights per token
    assert flops["lm_linear"] == pytest.approx(2 * 28 * 50_331_648 * 944)
    assert 3.9e12 < flops["total"] < 4.3e12
