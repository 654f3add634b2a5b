"""ScoringEngine: same numbers as build_batch + the model's own forward, on the tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training_bridge.rigel import fused
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.engine import ScoringEngine
from training_bridge.rigel.engine.prefix import plan_groups
from training_bridge.rigel.inputs import RigelExample, build_batch
from training_bridge.rigel.scoring import normalised_score


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
        expected = normalised_score(head(hidden)).numpy()
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


def test_linear_patch_embed_equals_the_convolution(tiny) -> None:  # type: ignore[no-untyped-def]
    embed = tiny.model.model.visual.patch_embed
    x = torch.randn(10, 3 * 2 * 16 * 16)
    with torch.no_grad():
        conv = embed(x)
        fused.linear_patch_embed()
        linear = embed(x)
    assert torch.allclose(conv, linear, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Shared prefixes (several candidates of one clip)


def _clip_groups() -> list[RigelExample]:
    """Three clips with 6, 2 and 6 candidates (same references within a clip), one sample alone,
    and a duplicated candidate (its prefix is cut one token before the end)."""
    rng = np.random.default_rng(3)
    frames = [
        rng.integers(0, 256, (8, 64, 64, 3), dtype=np.uint8),
        rng.integers(0, 256, (8, 64, 96, 3), dtype=np.uint8),
        rng.integers(0, 256, (6, 64, 64, 3), dtype=np.uint8),
    ]
    candidates = [
        "a man throws a ball .",
        "a dog runs",
        "two people talk in a room while it rains",
        "a",
        "a man throws a ball .",
        "a man throws a red ball .",
    ]
    examples = []
    for clip in range(3):
        references = [f"reference {clip} number {j} about a ball ." for j in range(clip + 2)]
        for k in range(6 if clip != 1 else 2):
            examples.append(
                RigelExample(
                    references=references,
                    candidate=candidates[(k + clip) % 6],
                    frames=frames[clip],
                )
            )
    examples.insert(3, RigelExample(["alone ."], "alone", frames=frames[0].copy()))
    return examples


def test_shared_prefix_path_equals_the_per_sample_path(tiny) -> None:  # type: ignore[no-untyped-def]
    examples = _clip_groups()
    head = Head(tiny.hidden_size)
    shared = ScoringEngine(tiny, head, batch_size=5, loader_batch=2, num_workers=0).run(examples)
    plain = ScoringEngine(
        tiny, head, batch_size=5, loader_batch=2, num_workers=0, share_prefix=False
    ).run(examples)
    assert shared.stats["shared_clips"] == 3
    assert shared.stats["shared_samples"] == 14
    assert plain.stats["shared_samples"] == 0
    # The vision tower ran on 3 clips + 1 alone instead of 15 samples.
    assert shared.stats["patches"] * 15 < plain.stats["patches"] * 5
    assert shared.stats["tokens"] < plain.stats["tokens"]
    assert np.abs(shared.scores - plain.scores).max() < 1e-5
    assert np.abs(shared.hidden - plain.hidden).max() < 1e-5
    assert np.abs(shared.score_logits - plain.score_logits).max() < 1e-5
    # and the model's own forward, sample by sample
    with torch.no_grad():
        reference = np.stack(
            [
                tiny.model(
                    **build_batch([e], tiny, reference_free=False), output_hidden_states=True
                )
                .hidden_states[-1][0, -1]
                .numpy()
                for e in examples
            ]
        )
    assert np.abs(shared.hidden - reference).max() < 1e-5
    # the suffixes one row per candidate against copies of the cache (the unpacked path)
    unpacked = ScoringEngine(tiny, head, batch_size=5, loader_batch=2, num_workers=0)
    unpacked.pack_suffixes = False
    assert np.abs(unpacked.run(examples).hidden - reference).max() < 1e-5


def test_shared_prefix_reference_free_groups_by_video_only(tiny) -> None:  # type: ignore[no-untyped-def]
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)
    examples = [
        RigelExample(references=[f"ref {k}"], candidate=f"candidate {k}", frames=frames)
        for k in range(3)
    ]
    assert plan_groups(examples, reference_free=False) == [[0], [1], [2]]
    assert plan_groups(examples, reference_free=True) == [[0, 1, 2]]
    shared = ScoringEngine(tiny, None, num_workers=0, reference_free=True).run(examples)
    plain = ScoringEngine(tiny, None, num_workers=0, reference_free=True, share_prefix=False).run(
        examples
    )
    assert shared.stats["shared_clips"] == 1
    assert np.abs(shared.score_logits - plain.score_logits).max() < 1e-5


@pytest.mark.slow  # inductor builds its C++ kernels on first use
def test_compiled_and_fused_engine_gives_the_eager_numbers_on_both_paths(tiny) -> None:  # type: ignore[no-untyped-def]
    """`compile_layers` + `fuse_elementwise` (what the pipeline's compiled engine runs): the
    per-sample path runs compiled decoder layers, the shared-prefix path (KV cache through the
    layers) eager ones, both with the fused element-wise ops; both give the eager engine's
    numbers. `close()` leaves the model and transformers' modules as they were."""
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    original_rotary = modeling_qwen3_vl.apply_rotary_pos_emb_vision
    examples = _clip_groups()
    head = Head(tiny.hidden_size)
    eager = ScoringEngine(tiny, head, batch_size=5, loader_batch=2, num_workers=0).run(examples)
    options = {"batch_size": 5, "loader_batch": 2, "num_workers": 0, "compile_layers": True}
    engine = ScoringEngine(tiny, head, fuse_elementwise=True, **options)
    language_model = tiny.model.model.language_model
    layers = len(language_model.layers)
    assert fused.compiled_decoder_layers(language_model) == layers
    assert modeling_qwen3_vl.apply_rotary_pos_emb_vision is not original_rotary
    compiled = engine.run(examples)
    assert compiled.stats["shared_samples"] == 14  # the one alone went through the compiled path
    assert fused.compiled_decoder_layers(language_model) == layers  # compiled again after groups
    for name in ("hidden", "score_logits", "scores"):
        assert np.abs(getattr(compiled, name) - getattr(eager, name)).max() < 1e-4, name
    engine.close()
    assert fused.compiled_decoder_layers(language_model) == 0
    assert modeling_qwen3_vl.apply_rotary_pos_emb_vision is original_rotary
    unshared = ScoringEngine(tiny, head, share_prefix=False, **options)
    result = unshared.run(examples)
    assert result.stats["shared_samples"] == 0
    assert np.abs(result.hidden - eager.hidden).max() < 1e-4
    unshared.close()


def test_engine_compile_setting_is_validated_and_follows_the_device() -> None:
    from training_bridge.rigel.config import ENGINE_COMPILE_MIN_SAMPLES, RigelConfig

    many = ENGINE_COMPILE_MIN_SAMPLES
    assert RigelConfig().engine_compile == "auto"
    assert not RigelConfig().compiles_engine("cpu", many)
    assert RigelConfig(device="cuda").compiles_engine("cuda", many)
    assert not RigelConfig(device="cuda").compiles_engine("cuda", many - 1)
    assert not RigelConfig(device="cuda").compiles_engine("cuda", None)  # scoring: unknown
    assert RigelConfig(engine_compile="on").compiles_engine("cpu", None)
    assert not RigelConfig(device="cuda", engine_compile="off").compiles_engine("cuda", many)
    with pytest.raises(ValueError, match="engine_compile must be auto, on or off"):
        RigelConfig(engine_compile="yes")
    config = RigelConfig(engine_compile="on")
    assert RigelConfig.from_dict(config.to_dict()) == config


def test_deepstack_without_sync_adds_exactly_what_boolean_indexing_adds(tiny) -> None:  # type: ignore[no-untyped-def]
    language_model = tiny.model.model.language_model
    torch.manual_seed(5)
    hidden = torch.randn(3, 11, tiny.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    mask = torch.rand(3, 11) < 0.4
    embeds = torch.randn(int(mask.sum()), tiny.hidden_size, dtype=torch.bfloat16)
    original = language_model._deepstack_process(hidden, mask, embeds)
    original.float().pow(2).sum().backward()
    expected_grad = hidden.grad.clone()
    hidden.grad = None
    fused.deepstack_without_sync()
    patched = language_model._deepstack_process(hidden, mask, embeds)
    patched.float().pow(2).sum().backward()
    assert torch.equal(patched, original)
    assert torch.equal(hidden.grad, expected_grad)
    assert not torch.equal(patched[mask], hidden[mask])  # the features were added
    fused.restore()
    assert torch.equal(language_model._deepstack_process(hidden, mask, embeds), original)


@pytest.mark.slow  # inductor builds its C++ kernels on first use
def test_compiled_vision_blocks_give_the_eager_numbers_with_one_graph(tiny) -> None:  # type: ignore[no-untyped-def]
    """`compile_vision`: with a uniform group size each vision block runs as one compiled graph
    (one graph for every block, no graph break) and the engine's numbers are the eager ones;
    batches whose clips have groups of several sizes run transformers' blocks; `close()`
    restores the blocks."""
    from torch._dynamo.utils import counters

    from training_bridge.rigel.engine.attention import compiled_vision_blocks

    examples = _examples()  # 64x64 and 64x96 clips: uniform batches and a mixed one
    head = Head(tiny.hidden_size)
    options = {"batch_size": 2, "loader_batch": 1, "num_workers": 0, "share_prefix": False}
    eager = ScoringEngine(tiny, head, **options).run(examples)
    torch._dynamo.reset()
    counters.clear()
    try:
        engine = ScoringEngine(tiny, head, compile_vision=True, **options)
        blocks = len(tiny.model.model.visual.blocks)
        assert compiled_vision_blocks(tiny.model) == blocks
        compiled = engine.run(examples)
        assert counters["stats"]["unique_graphs"] == 1  # both blocks, every uniform batch
        assert not counters["graph_break"]
        for name in ("hidden", "score_logits", "scores"):
            assert np.abs(getattr(compiled, name) - getattr(eager, name)).max() < 1e-4, name
        graphs = counters["stats"]["unique_graphs"]
        engine.run(examples)  # the same shapes again: nothing new to compile
        assert counters["stats"]["unique_graphs"] == graphs
        engine.close()
        assert compiled_vision_blocks(tiny.model) == 0
    finally:
        torch._dynamo.reset()


def _three_protocols() -> tuple[list[list[RigelExample]], list[bool]]:
    """Three clips (6, 2 and 6 candidates, 3 references each) under reference-free, 1-ref and
    all-refs: three parallel example lists, one prompt setting each."""
    rng = np.random.default_rng(5)
    frames = [
        rng.integers(0, 256, (8, 64, 64, 3), dtype=np.uint8),
        rng.integers(0, 256, (8, 64, 96, 3), dtype=np.uint8),
        rng.integers(0, 256, (6, 64, 64, 3), dtype=np.uint8),
    ]
    words = ["a man throws a ball .", "a dog runs", "two people talk", "a", "a red ball ."]
    base = [
        (clip, [f"reference {clip} number {j} ." for j in range(3)], words[(k + clip) % 5])
        for clip in range(3)
        for k in range(6 if clip != 1 else 2)
    ]
    protocols = [
        [RigelExample(refs, text, frames=frames[clip]) for clip, refs, text in base],
        [RigelExample(refs[:1], text, frames=frames[clip]) for clip, refs, text in base],
        [RigelExample(refs, text, frames=frames[clip]) for clip, refs, text in base],
    ]
    return protocols, [True, False, False]


def test_three_protocols_in_one_pass_give_the_scores_of_three_passes(tiny) -> None:  # type: ignore[no-untyped-def]
    """Issue 29 point 2: one engine pass over the three protocols (each sample with its own
    prompt setting) decodes each clip and runs its vision tower once, with the same numbers as
    one pass per protocol."""
    protocols, settings = _three_protocols()
    head = Head(tiny.hidden_size)
    options = {"batch_size": 16, "group_loader_batch": 2, "num_workers": 0}
    separate = [
        ScoringEngine(tiny, head, reference_free=free, **options).run(examples)
        for examples, free in zip(protocols, settings, strict=True)
    ]
    together_examples = []
    for examples, free in zip(protocols, settings, strict=True):
        for example in examples:
            example.reference_free = free
        together_examples.extend(examples)
    # the engine's own default is the opposite of one of the settings: each sample's counts
    together = ScoringEngine(tiny, head, reference_free=False, **options).run(together_examples)
    n = len(protocols[0])
    for number, alone in enumerate(separate):
        rows = slice(number * n, (number + 1) * n)
        assert np.abs(together.hidden[rows] - alone.hidden).max() < 1e-5
        assert np.abs(together.scores[rows] - alone.scores).max() < 1e-6
    # 9 groups (3 clips x 3 settings), the vision tower on 3 clips instead of 9
    assert together.stats["shared_clips"] == 9
    assert together.stats["vision_clips"] == 3
    assert sum(alone.stats["vision_clips"] for alone in separate) == 9
    # the settings differ: the reference-free scores are not the 1-ref ones
    assert np.abs(separate[0].hidden - separate[1].hidden).max() > 1e-3
