"""The generative judge (`training_bridge.metrics.judge`): EXPERT's score parser and 0.1 binning
on hand cases (malformed answers included), the per-criterion explanation parser, the prompts as
rendered, the two-stage conversation with a stand-in model, and the plug-in end to end on a tiny
random LLaVA saved to disk, against the same conversation run by hand through transformers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from tests.metrics.tiny_generative import save_tiny_llava
from training_bridge.metrics.judge import (
    CRITERIA,
    JudgeMetric,
    Step,
    bin_score,
    expert_explanation_prompt,
    expert_scoring_prompt,
    gveval_prompt,
    parse_expert_score,
    parse_explanation,
    parse_gveval_score,
    pick_frames,
    smoothed_expert_score,
)
from training_bridge.metrics.plugins import MetricItem, Video, available_metrics
from training_bridge.metrics.standard import MetricUnavailable


@pytest.mark.parametrize(
    ("value", "binned"),
    [
        (0.0, 0.0),
        (0.04, 0.0),
        (0.05, 0.1),
        (0.35, 0.4),
        (0.649, 0.6),
        (0.65, 0.7),
        (0.95, 1.0),
        (1.0, 1.0),
    ],
)
def test_bin_score_snaps_to_the_nearest_tenth_halves_up(value: float, binned: float) -> None:
    assert bin_score(value) == binned


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        ("0.7", 0.7),
        ("0.73", 0.7),
        ("0.75", 0.8),
        ("Score: 0.4", 0.4),
        ("0.2.", 0.2),  # trailing dot stripped, as the authors' parser does
        ("1.0", 1.0),
        ("1", 1.0),
        ("0", 0.0),
        ("  0.96</s>", 1.0),
        ("1.5", None),  # outside [0, 1]: the authors' loop skips it
        ("7", None),
        (".6", None),  # leading dot stripped -> 6 -> outside the range
        ("0.7 or 0.8", None),  # two numbers run together -> not one number
        ("The caption is accurate.", None),
        ("", None),
    ],
)
def test_expert_score_parser_on_hand_cases(answer: str, score: float | None) -> None:
    assert parse_expert_score(answer) == score


def test_gveval_score_parser_takes_the_last_score_in_dollars() -> None:
    assert parse_gveval_score("Accurate and short. The final score is $85$.") == 85.0
    assert parse_gveval_score("I first thought $40$, but The final score is $ 70 $.") == 70.0
    assert parse_gveval_score("The final score is $100$.") == 100.0
    assert parse_gveval_score("The final score is $120$.") is None
    assert parse_gveval_score("The final score is 85.") is None
    assert parse_gveval_score("") is None


def test_explanation_parser_reads_the_three_criteria() -> None:
    answer = (
        "Fluency: The caption is grammatical.\n"
        "Relevance: It says a dog, but a cat is shown.\n"
        "Descriptiveness: It misses the red sofa."
    )
    assert parse_explanation(answer) == {
        "fluency": "The caption is grammatical.",
        "relevance": "It says a dog, but a cat is shown.",
        "descriptiveness": "It misses the red sofa.",
    }
    # Any order, markdown, case, and an explanation over two lines.
    loose = (
        "- **Relevance:** wrong animal\n"
        "- **descriptiveness**: too short;\n  no setting\n"
        "FLUENCY: fine"
    )
    assert parse_explanation(loose) == {
        "fluency": "fine",
        "relevance": "wrong animal",
        "descriptiveness": "too short; no setting",
    }


@pytest.mark.parametrize(
    "answer",
    [
        "Fluency: fine\nRelevance: wrong",  # a criterion missing
        "Fluency: fine\nRelevance:\nDescriptiveness: short",  # an empty one
        "Fluency: a\nRelevance: b\nDescriptiveness: c\nFluency: d",  # one twice
        "The caption is fine.",
        "",
    ],
)
def test_explanation_parser_rejects_malformed_answers(answer: str) -> None:
    assert parse_explanation(answer) is None


def test_prompts_as_rendered() -> None:
    assert expert_scoring_prompt("a  man\nruns ") == (
        "Evaluate the caption and assign a score on a scale of 0.0 to 1.0.\n\n"
        "Caption: a man runs\n\nScore (0.0~1.0):"
    )
    explanation = expert_explanation_prompt("a man runs")
    assert explanation.startswith(
        "Provide a brief explanation for the score based on three criteria: Fluency, Relevance, "
        "and Descriptiveness.\n\nCaption: a man runs\n\nEvaluation Criteria:\n- Fluency: "
    )
    assert explanation.endswith(
        "Output Format:\nFluency: {Provide explanation here.}\n"
        "Relevance: {Provide explanation here.}\nDescriptiveness: {Provide explanation here.}"
    )
    rubric = gveval_prompt("a man runs", ["a man is running", "someone jogs"], frames=3)
    assert "shown 3 frames" in rubric
    assert (
        "Reference Captions:\n'a man is running'; 'someone jogs'\n\nCaption:\na man runs\n"
        in rubric
    )
    assert rubric.rstrip().endswith(
        "N must be an integer from 0 to 100 written between dollar signs."
    )
    assert "The final score is $N$." in rubric


def test_pick_frames_spreads_them_evenly() -> None:
    frames = np.arange(10)[:, None, None, None] * np.ones((1, 2, 2, 3), dtype=np.uint8)
    picked = pick_frames(frames, 3)
    assert [int(frame[0, 0, 0]) for frame in picked] == [0, 4, 9]  # round(linspace(0, 9, 3))
    assert len(pick_frames(frames[:2], 3)) == 2
    assert len(pick_frames(frames[0], 3)) == 1  # an image


class StandIn:
    """A stand-in VLM: answers from a script and records every conversation it was given."""

    def __init__(self, answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[tuple[str, str]], int]] = []

    def generate(self, messages, images):  # type: ignore[no-untyped-def]
        self.calls.append((list(messages), len(images)))
        return self.answers.pop(0)


def _video(key: str, count: int) -> Video:
    return Video.of(key, np.zeros((count, 8, 8, 3), dtype=np.uint8))


def test_expert_two_stages_explanation_follows_the_score() -> None:
    vlm = StandIn(
        [
            "0.73",
            "Fluency: fine.\nRelevance: a cat, not a dog.\nDescriptiveness: no setting.",
            "not a number",
            "Fluency: ok",
        ]
    )
    metric = JudgeMetric("expert_judge", vlm, template="expert", unparsed="lowest")
    clip = _video("clip-1", 10)
    items = [
        MetricItem("a dog sleeps", (), clip),
        MetricItem("a  dog sleeps", (), clip),  # the same pair: judged once
        MetricItem("a cat", (), Video.of("image-1", np.zeros((8, 8, 3), dtype=np.uint8)[None])),
    ]
    assert metric.score(items) == [0.7, 0.7, 0.0]
    assert len(vlm.calls) == 4
    first, second = vlm.calls[0], vlm.calls[1]
    assert first == ([("user", expert_scoring_prompt("a dog sleeps"))], 3)
    assert second == (
        [
            ("user", expert_scoring_prompt("a dog sleeps")),
            ("assistant", "0.7"),
            ("user", expert_explanation_prompt("a dog sleeps")),
        ],
        3,
    )
    assert vlm.calls[2][1] == 1  # the image: one frame
    assert vlm.calls[3][0][1] == ("assistant", "not a number")  # raw answer when unparsed
    assert metric.records[0].explanation == {
        "fluency": "fine.",
        "relevance": "a cat, not a dog.",
        "descriptiveness": "no setting.",
    }
    assert metric.records[2].score is None and metric.records[2].explanation is None


def test_unparsed_answers_make_the_judge_unavailable_by_default() -> None:
    metric = JudgeMetric("expert_judge", StandIn(["0.5", "great caption"]), explanations=False)
    items = [MetricItem("a", (), _video("c1", 2)), MetricItem("b", (), _video("c2", 2))]
    with pytest.raises(MetricUnavailable, match="1 of 2 judge answers have no readable score"):
        metric.score(items)


def test_gveval_style_judge_sends_references_and_frames() -> None:
    vlm = StandIn(["Good. The final score is $64$.", "Bad. The final score is $12$."])
    metric = JudgeMetric("gveval_judge", vlm, template="gveval", frames=2)
    assert metric.needs_references
    items = [
        MetricItem("a dog runs", ("a dog is running",), _video("c1", 5)),
        MetricItem("a cat", ("a dog is running",), _video("c1", 5)),
    ]
    assert metric.score(items) == [64.0, 12.0]
    assert vlm.calls[0] == (
        [("user", gveval_prompt("a dog runs", ["a dog is running"], frames=2))],
        2,
    )


def test_judges_are_unavailable_without_weights(tmp_path: Path) -> None:
    available, reasons = available_metrics({}, ["expert_judge", "gveval_judge"])
    assert available == {}
    assert reasons["expert_judge"].startswith("no weights given: set judge_model=")
    _, reasons = available_metrics({"judge_model": str(tmp_path / "none")}, ["expert_judge"])
    assert reasons["expert_judge"] == f"judge_model={tmp_path / 'none'}: no such directory"
    with pytest.raises(ValueError, match="judge_unparsed"):
        available_metrics(
            {"judge_model": str(tmp_path), "judge_unparsed": "skip"}, ["expert_judge"]
        )


def test_expert_judge_end_to_end_on_a_tiny_llava(tmp_path: Path) -> None:
    """The plug-in's answers equal the same two-turn conversation run by hand through the
    checkpoint's public processor and `generate`, and its scores are what the parser reads."""
    import torch
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    directory = save_tiny_llava(tmp_path / "llava")
    settings = {
        "judge_model": str(directory),
        "judge_unparsed": "lowest",
        "judge_max_new_tokens": "6",
    }
    available, reasons = available_metrics(settings, ["expert_judge"])
    assert reasons == {}
    metric = available["expert_judge"]
    rng = np.random.default_rng(0)
    clips = [
        Video.of("c1", rng.integers(0, 256, (7, 40, 48, 3), dtype=np.uint8)),
        Video.of("c2", rng.integers(0, 256, (1, 32, 32, 3), dtype=np.uint8)),
    ]
    items = [MetricItem("a man plays a guitar", (), clips[0]), MetricItem("a dog", (), clips[1])]
    scores = metric.score(items)

    processor = AutoProcessor.from_pretrained(directory, local_files_only=True)
    model = LlavaForConditionalGeneration.from_pretrained(directory, local_files_only=True).eval()

    def answer(turns: list[tuple[str, str]], images: list[np.ndarray]) -> str:
        messages = []
        for index, (role, text) in enumerate(turns):
            parts = [{"type": "image"} for _ in images] if index == 0 else []
            messages.append({"role": role, "content": [*parts, {"type": "text", "text": text}]})
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], images=images, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**inputs, do_sample=False, max_new_tokens=6)
        return processor.tokenizer.decode(
            out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True
        ).strip()

    for item, record, score in zip(items, metric.records, scores, strict=True):  # type: ignore[attr-defined]
        assert item.video is not None
        frames = item.video.load()
        images = [
            frames[i]
            for i in np.round(np.linspace(0, len(frames) - 1, min(3, len(frames)))).astype(int)
        ]
        first = answer([("user", expert_scoring_prompt(item.candidate))], images)
        assert record.score_answer == first
        assert record.score == parse_expert_score(first)
        assert score == (0.0 if record.score is None else record.score)
        said = first if record.score is None else f"{record.score:.1f}"
        second = answer(
            [
                ("user", expert_scoring_prompt(item.candidate)),
                ("assistant", said),
                ("user", expert_explanation_prompt(item.candidate)),
            ],
            images,
        )
        assert record.explanation_answer == second
        assert record.explanation == parse_explanation(second)
    assert set(CRITERIA) == {"fluency", "relevance", "descriptiveness"}


def _steps(*tokens: tuple[str, dict[str, float]]) -> list[Step]:
    return [Step(text, digits) for text, digits in tokens]


def test_smoothed_expert_score_on_hand_cases() -> None:
    tenths = {"6": 0.2, "7": 0.5, "8": 0.3}
    # 0.1 * (6*0.2 + 7*0.5 + 8*0.3) = 0.71
    assert smoothed_expert_score(_steps(("0", {}), (".", {}), ("7", tenths))) == pytest.approx(0.71)
    # a hundredths digit adds 0.01 * its expected value: 0.71 + 0.01 * (3*0.5 + 4*0.5) = 0.745
    hundredths = {"3": 0.5, "4": 0.5}
    steps = _steps(("0", {}), (".", {}), ("7", tenths), ("3", hundredths))
    assert smoothed_expert_score(steps) == pytest.approx(0.745)
    # 1.0: 0.9 * p("0") + p("1") at the step of the "1"
    one = _steps(("1", {"0": 0.3, "1": 0.6}), (".", {}), ("0", {"0": 0.9}))
    assert smoothed_expert_score(one) == pytest.approx(0.9 * 0.3 + 0.6)
    # a leading space on the tokens is no matter
    assert smoothed_expert_score(_steps((" 0", {}), (".", {}), ("7", tenths))) == pytest.approx(
        0.71
    )
    # not a score, out of range, no digit step after the point
    assert (
        smoothed_expert_score(
            _steps(
                ("good", {}),
            )
        )
        is None
    )
    assert smoothed_expert_score(_steps(("1", {}), (".", {}), ("5", {}))) is None
    assert (
        smoothed_expert_score(
            _steps(
                ("0.7", {}),
            )
        )
        is None
    )
    assert (
        smoothed_expert_score(
            _steps(
                ("0", {}),
            )
        )
        is None
    )


class ScoredStandIn(StandIn):
    def __init__(self, answers: Sequence[str], steps: list[Step]) -> None:
        super().__init__(answers)
        self.steps = steps

    def generate_scored(self, messages, images):  # type: ignore[no-untyped-def]
        self.calls.append((list(messages), len(images)))
        return "0.7", self.steps


def test_smoothed_mode_scores_and_hands_the_score_to_stage_two() -> None:
    steps = _steps(("0", {}), (".", {}), ("7", {"6": 0.2, "7": 0.5, "8": 0.3}))
    vlm = ScoredStandIn(["Fluency: a\nRelevance: b\nDescriptiveness: c"], steps)
    metric = JudgeMetric("expert_judge", vlm, score_mode="smoothed")
    assert metric.score([MetricItem("a dog", (), _video("c", 3))]) == [pytest.approx(0.71)]
    assert vlm.calls[1][0][1] == ("assistant", "0.71")
    with pytest.raises(MetricUnavailable, match="digit probabilities"):
        JudgeMetric("expert_judge", StandIn(["0.5"]), score_mode="smoothed").score(
            [MetricItem("a", (), _video("c", 1))]
        )
    with pytest.raises(ValueError, match="judge_score"):
        available_metrics({"judge_score": "mean"}, ["expert_judge"])


def test_digit_probabilities_come_from_the_model_s_logits(tmp_path: Path) -> None:
    """The first step's digit probabilities equal the softmax of one forward pass of the
    prompt, and the scored answer is the plain one."""
    import torch
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    from training_bridge.metrics.judge import TransformersVlm

    directory = save_tiny_llava(tmp_path / "llava", seed=2)
    vlm = TransformersVlm(str(directory), max_new_tokens=3)
    image = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    turns = [("user", expert_scoring_prompt("a dog"))]
    answer, steps = vlm.generate_scored(turns, [image])
    assert answer == vlm.generate(turns, [image]) and len(steps) == 3
    processor = AutoProcessor.from_pretrained(directory, local_files_only=True)
    model = LlavaForConditionalGeneration.from_pretrained(directory, local_files_only=True).eval()
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": turns[0][1]}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    with torch.inference_mode():
        logits = model(**inputs).logits[0, -1]
    probabilities = torch.softmax(logits.float(), dim=-1)
    for digit in "0123456789":
        token = processor.tokenizer.encode(digit, add_special_tokens=False)[-1]
        assert steps[0].digits[digit] == pytest.approx(float(probabilities[token]), abs=1e-6)
