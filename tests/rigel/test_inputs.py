"""build_batch: the forward kwargs of a left-padded batch, checked on the tiny Qwen3-VL."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.rigel.oracles import video_placeholder
from training_bridge.rigel import prompts
from training_bridge.rigel.backbone import load_backbone
from training_bridge.rigel.inputs import (
    RigelExample,
    build_batch,
    mm_token_type_ids,
    rope_position_ids,
)


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    return load_backbone("tiny", device="cpu", seed=0)


def _examples() -> list[RigelExample]:
    rng = np.random.default_rng(7)
    return [
        RigelExample(
            references=["a man throws a ball against a wall ."],
            candidate="a man throws a ball",
            frames=rng.integers(0, 256, (8, 64, 64, 3), dtype=np.uint8),
        ),
        RigelExample(
            references=[
                "a woman slices vegetables in a kitchen .",
                "someone is cutting carrots on a board .",
                "a cook chops food quickly .",
            ],
            candidate="a woman is cutting carrots on a wooden board in a bright kitchen",
            frames=rng.integers(0, 256, (8, 96, 64, 3), dtype=np.uint8),
            fps=30.0,
            frame_indices=[0, 10, 20, 30, 40, 50, 60, 70],
        ),
        RigelExample(
            references=["two dogs run on a beach .", "dogs play in the sand ."],
            candidate="dogs",
            frames=rng.integers(0, 256, (5, 48, 80, 3), dtype=np.uint8),
        ),
    ]


def test_batch_has_exactly_the_forward_kwargs_left_padded(tiny) -> None:  # type: ignore[no-untyped-def]
    batch = build_batch(_examples(), tiny, reference_free=False)
    assert set(batch) == {
        "input_ids",
        "attention_mask",
        "mm_token_type_ids",
        "pixel_values_videos",
        "video_grid_thw",
    }
    ids, mask = batch["input_ids"], batch["attention_mask"]
    lengths = mask.sum(1).tolist()
    assert len(set(lengths)) == 3  # three different lengths
    for row, length in enumerate(lengths):
        assert mask[row, -length:].eq(1).all() and mask[row, : ids.shape[1] - length].eq(0).all()
        assert ids[row, : ids.shape[1] - length].eq(tiny.pad_token_id).all()
    # Every row ends with the opened assistant turn: the next token is the digit.
    tail = tiny.tokenizer.decode(ids[0, -12:])
    assert tail.endswith("<|im_start|>assistant\n")
    # Video pads: one per merged patch, marked 2 in mm_token_type_ids, nowhere else.
    grids = batch["video_grid_thw"].tolist()
    assert grids == [[4, 4, 4], [4, 6, 4], [3, 4, 4]]  # 8, 8, 5 (padded to 6) frames at 64-96 px
    types = batch["mm_token_type_ids"]
    for row, (t, h, w) in enumerate(grids):
        assert int((ids[row] == tiny.video_token_id).sum()) == t * h * w // 4
        assert torch.equal(types[row] == 2, ids[row] == tiny.video_token_id)
        assert int((types[row] == 1).sum()) == 0
    assert batch["pixel_values_videos"].shape == (
        sum(t * h * w for t, h, w in grids),
        3 * 2 * 16 * 16,
    )


def test_timestamps_follow_the_frame_indices(tiny) -> None:  # type: ignore[no-untyped-def]
    text = video_placeholder((4, 2, 2), [0, 10, 20, 30, 40, 50, 60, 70], 30.0, tiny)
    assert text.startswith("<0.2 seconds><|vision_start|><|video_pad|><|vision_end|><0.8 seconds>")
    assert text.count("<|video_pad|>") == 4
    assert "<2.2 seconds>" in text


def test_last_position_logits_alone_equal_batched(tiny) -> None:  # type: ignore[no-untyped-def]
    examples = _examples()
    batch = build_batch(examples, tiny, reference_free=False)
    with torch.no_grad():
        batched = tiny.model(**batch).logits[:, -1]
        for row, example in enumerate(examples):
            alone = tiny.model(**build_batch([example], tiny, reference_free=False)).logits[0, -1]
            assert torch.allclose(alone, batched[row], atol=1e-5, rtol=0)
    assert not torch.allclose(batched[0], batched[1], atol=1e-3)  # not trivially equal rows


def test_hidden_state_and_lm_head_give_the_score_logits(tiny) -> None:  # type: ignore[no-untyped-def]
    batch = build_batch(_examples()[:2], tiny, reference_free=True)
    with torch.no_grad():
        out = tiny.model(**batch, output_hidden_states=True)
        hidden = out.hidden_states[-1][:, -1]
        logits = tiny.model.lm_head(hidden)[:, tiny.score_token_ids]
    assert torch.allclose(logits, out.logits[:, -1, tiny.score_token_ids], atol=1e-5)


def test_reference_free_prompt_has_no_references(tiny) -> None:  # type: ignore[no-untyped-def]
    example = _examples()[1]
    with_refs = build_batch([example], tiny, reference_free=False)
    without = build_batch([example], tiny, reference_free=True)
    text_with = tiny.tokenizer.decode(with_refs["input_ids"][0])
    text_without = tiny.tokenizer.decode(without["input_ids"][0])
    assert "someone is cutting carrots" in text_with
    assert "someone is cutting carrots" not in text_without
    assert "Candidate caption: a woman is cutting carrots" in text_without


def test_rope_positions_match_the_model(tiny) -> None:  # type: ignore[no-untyped-def]
    batch = build_batch(_examples(), tiny, reference_free=False)
    expected, _ = tiny.model.model.get_rope_index(
        batch["input_ids"],
        batch["mm_token_type_ids"],
        video_grid_thw=batch["video_grid_thw"],
        attention_mask=batch["attention_mask"],
    )
    for row in range(3):
        keep = batch["attention_mask"][row].bool()
        ours = rope_position_ids(
            batch["mm_token_type_ids"][row][keep].numpy(), batch["video_grid_thw"][row].tolist(), 2
        )
        assert np.array_equal(expected[:, row][:, keep].numpy(), ours)


def test_mm_token_type_ids(tiny) -> None:  # type: ignore[no-untyped-def]
    ids = [5, tiny.video_token_id, tiny.image_token_id, tiny.vision_start_token_id]
    assert mm_token_type_ids(ids, tiny).tolist() == [0, 2, 1, 0]


def test_prompt_ends_with_the_opened_assistant_turn(tiny) -> None:  # type: ignore[no-untyped-def]
    text = prompts.render_prompt(
        tiny.tokenizer, references=["a dog ."], candidate="a cat", reference_free=False
    )
    assert text.endswith("<|im_start|>assistant\n")
    assert text.count("<|video_pad|>") == 1
    for value, label, description in prompts.RUBRIC_LEVELS:
        assert f"{value} ({label}): {description}" in text
    with pytest.raises(ValueError):
        prompts.prompt_text(references=[], candidate="a cat", reference_free=False)


def test_segment_tokenisation_equals_tokenising_the_expanded_prompt(tiny) -> None:  # type: ignore[no-untyped-def]
    from tests.rigel.oracles import expand_prompt
    from training_bridge.rigel.backbone import build_tokenizer
    from training_bridge.rigel.inputs import tokenize_expanded

    for tokenizer in (tiny.tokenizer, build_tokenizer("large")):
        backbone = type(tiny)(**{**tiny.__dict__, "tokenizer": tokenizer})
        backbone.video_token_id = tokenizer.convert_tokens_to_ids("<|video_pad|>")
        backbone.vision_start_token_id = tokenizer.convert_tokens_to_ids("<|vision_start|>")
        backbone.vision_end_token_id = tokenizer.convert_tokens_to_ids("<|vision_end|>")
        prompt = prompts.render_prompt(
            tokenizer, references=["a b c .", "x  y"], candidate="it's 12.5 s", reference_free=False
        )
        grid, indices, fps = (3, 4, 6), [0, 9, 18, 27, 36, 45], 29.97
        full = tokenizer(
            expand_prompt(prompt, video_placeholder(grid, indices, fps, backbone), backbone),
            add_special_tokens=False,
        )["input_ids"]
        assert tokenize_expanded(prompt, grid, indices, fps, backbone) == list(full)


def test_frame_times_of_presampled_frames_give_the_timestamps(tiny, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from PIL import Image

    rng = np.random.default_rng(4)
    frames_dir = tmp_path / "frames"
    frames_dir.mkdir()
    for k in range(8):
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(
            frames_dir / f"{k:03d}.png"
        )
    times = [(k + 0.5) * 10.0 / 8 for k in range(8)]  # common.media.frame_times(10 s, 8)
    example = RigelExample(
        references=["r ."], candidate="c", frame_paths=frames_dir, frame_times=times
    )
    text = tiny.tokenizer.decode(build_batch([example], tiny, reference_free=False)["input_ids"][0])
    # groups (0.625, 1.875) (3.125, 4.375) (5.625, 6.875) (8.125, 9.375): means 1.25, 3.75, 6.25, 8.75
    for stamp in ("<1.2 seconds>", "<3.8 seconds>", "<6.2 seconds>", "<8.8 seconds>"):
        assert stamp in text
