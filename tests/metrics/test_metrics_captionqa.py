"""CaptionQA (`training_bridge.metrics.captionqa`): the question file, the options as asked, the
prompt, the per-question score rules, the accuracy of a hand case with a stand-in answerer, and the
plug-in end to end on a tiny random causal LM saved to disk, whose letter choices are checked
against the model's next-token distribution taken through `generate` (an independent path)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from tests.metrics.tiny_generative import save_tiny_lm
from training_bridge.metrics.captionqa import (
    CANNOT_ANSWER,
    LETTERS,
    SYSTEM_PROMPT,
    CaptionQAMetric,
    LmAnswerer,
    Question,
    is_yes_no,
    prepare,
    question_score,
    read_questions,
    render_prompt,
)
from training_bridge.metrics.plugins import MetricItem, Video, available_metrics
from training_bridge.metrics.standard import MetricUnavailable

BANK = {
    "clip-a": [
        {
            "question": "What color is the car?",
            "choices": ["red", "blue", "green"],
            "answer": "red",
        },
        {"question": "How many people are there?", "choices": ["one", "two"], "answer": "two"},
        {"question": "Is the car moving?", "choices": ["yes", "no"], "answer": "yes"},
    ],
    "clip-b": [
        {"question": "What animal is shown?", "choices": ["cat", "dog", "bird"], "answer": "dog"},
    ],
}


def _bank_file(tmp_path: Path) -> Path:
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(BANK))
    return path


def test_question_file_is_read_and_checked(tmp_path: Path) -> None:
    bank = read_questions(_bank_file(tmp_path))
    assert bank["clip-b"] == [Question("What animal is shown?", ("cat", "dog", "bird"), "dog")]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"c": [{"question": "Q?", "choices": ["a", "b"], "answer": "z"}]}))
    with pytest.raises(ValueError, match="answer must be the text of one of its choices"):
        read_questions(bad)
    bad.write_text(json.dumps({"c": [{"question": "Q?", "choices": ["a"], "answer": "a"}]}))
    with pytest.raises(ValueError, match="at least two choices"):
        read_questions(bad)


def test_options_as_asked() -> None:
    colour = Question("What color is the car?", ("red", "blue", "green"), "red")
    moving = Question("Is the car moving?", ("yes", "no"), "yes")
    assert not is_yes_no(colour) and is_yes_no(moving)
    assert is_yes_no(Question("Does it rain?", ("a lot", "a little"), "a lot"))
    assert not is_yes_no(
        Question("Which way?", ("north", "south"), "north")
    )  # qa.py: "no" in "north"
    prepared = prepare(colour, seed=0, key="clip-a", number=0)
    assert sorted(prepared.options) == sorted(["red", "blue", "green", CANNOT_ANSWER])
    assert prepared.options[prepared.correct] == "red"
    assert prepared.options[prepared.cannot or 0] == CANNOT_ANSWER
    assert prepare(colour, seed=0, key="clip-a", number=0) == prepared  # deterministic
    orders = {prepare(colour, seed=seed, key="clip-a", number=0).options for seed in range(12)}
    assert len(orders) > 1  # the seed shuffles
    yes_no = prepare(moving, seed=0, key="clip-a", number=2)
    assert yes_no.cannot is None and sorted(yes_no.options) == ["no", "yes"]


def test_prompt_as_rendered() -> None:
    prepared = prepare(Question("Is it red?", ("yes", "no"), "yes"), seed=0, key="k", number=0)
    expected_lines = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(prepared.options))
    assert render_prompt("a red car", prepared) == (
        f"Caption:\na red car\n\nQuestion:\nIs it red?\n\nOptions:\n{expected_lines}\n\nAnswer:"
    )


def test_question_score_rules() -> None:
    prepared = prepare(Question("What?", ("a", "b", "c"), "b"), seed=0, key="k", number=0)
    wrong = next(i for i, o in enumerate(prepared.options) if o not in ("b", CANNOT_ANSWER))
    assert question_score(prepared.correct, prepared) == 1.0
    assert question_score(wrong, prepared) == 0.0
    assert question_score(prepared.cannot or 0, prepared) == 0.0
    assert question_score(prepared.cannot or 0, prepared, "partial") == pytest.approx(1 / 3 + 0.05)
    assert question_score(wrong, prepared, "partial") == 0.0


class WordMatcher:
    """A stand-in answerer: the option whose text is a word of the caption, else "Cannot
    answer", else the first option."""

    def choose(self, system: str, prompt: str, letters: Sequence[str]) -> int:
        assert system == SYSTEM_PROMPT
        caption = prompt.split("Caption:\n", 1)[1].split("\n\nQuestion:", 1)[0].split()
        options = prompt.split("Options:\n", 1)[1].split("\n\nAnswer:", 1)[0].splitlines()
        texts = [line.split(". ", 1)[1] for line in options]
        assert len(texts) == len(letters)
        for index, text in enumerate(texts):
            if text in caption:
                return index
        return texts.index(CANNOT_ANSWER) if CANNOT_ANSWER in texts else 0


def test_accuracy_of_a_hand_case_with_a_stand_in_answerer(tmp_path: Path) -> None:
    bank = read_questions(_bank_file(tmp_path))
    frames = np.zeros((1, 4, 4, 3), dtype=np.uint8)
    items = [
        # clip-a: red (right), no count word -> cannot answer, "yes" in caption (right): 2/3
        MetricItem("a red car moving yes", (), Video.of("clip-a", frames)),
        # clip-a: blue (wrong), "two" (right), "no" (wrong): 1/3
        MetricItem("two people in a blue car no", (), Video.of("clip-a", frames)),
        # clip-b: dog (right): 1
        MetricItem("a dog barks", (), Video.of("clip-b", frames)),
    ]
    metric = CaptionQAMetric(bank, WordMatcher())
    assert metric.score(items) == pytest.approx([2 / 3, 1 / 3, 1.0])
    assert metric.answers[0] == ["red", CANNOT_ANSWER, "yes"]
    partial = CaptionQAMetric(bank, WordMatcher(), scoring="partial")
    # the cannot-answer of the 2-choice question earns 1/2 + 0.05
    assert partial.score(items) == pytest.approx([(1 + 0.55 + 1) / 3, 1 / 3, 1.0])
    with pytest.raises(MetricUnavailable, match="no questions for 1 of 2"):
        metric.score([items[0], MetricItem("x", (), Video.of("clip-z", frames))])


def test_captionqa_is_unavailable_without_model_or_questions(tmp_path: Path) -> None:
    _, reasons = available_metrics({}, ["captionqa"])
    assert reasons["captionqa"].startswith("no weights given: set captionqa_model=")
    model = save_tiny_lm(tmp_path / "lm")
    _, reasons = available_metrics({"captionqa_model": str(model)}, ["captionqa"])
    assert reasons["captionqa"].startswith("no questions given: set captionqa_questions=")
    with pytest.raises(ValueError, match="captionqa_scoring"):
        available_metrics({"captionqa_scoring": "best"}, ["captionqa"])


@pytest.mark.parametrize("chat", [True, False])
def test_captionqa_end_to_end_on_a_tiny_lm(tmp_path: Path, chat: bool) -> None:
    """Each choice is the letter the model's own next-token distribution (through `generate`,
    one step) ranks first, and the score is the mean of the rule over the clip's questions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = save_tiny_lm(tmp_path / "lm", chat=chat)
    settings = {"captionqa_model": str(directory), "captionqa_questions": str(_bank_file(tmp_path))}
    available, reasons = available_metrics(settings, ["captionqa"])
    assert reasons == {}
    metric = available["captionqa"]
    frames = np.zeros((1, 4, 4, 3), dtype=np.uint8)
    items = [
        MetricItem("a red car with two people", (), Video.of("clip-a", frames)),
        MetricItem("a dog", (), Video.of("clip-b", frames)),
    ]
    scores = metric.score(items)

    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).eval()
    bank = read_questions(_bank_file(tmp_path))
    for item, score, chosen in zip(items, scores, metric.answers, strict=True):  # type: ignore[attr-defined]
        assert item.video is not None
        key = item.video.key
        expected = []
        for number, question in enumerate(bank[key]):
            prepared = prepare(question, seed=0, key=key, number=number)
            prompt = render_prompt(item.candidate, prepared)
            if chat:
                context = tokenizer.apply_chat_template(
                    [
                        {"role": "system", "content": SYSTEM_PROMPT},
                        {"role": "user", "content": prompt},
                    ],
                    add_generation_prompt=True,
                    tokenize=False,
                )
                lead = ""
            else:
                context, lead = f"{SYSTEM_PROMPT}\n\n{prompt}", " "
            ids = torch.tensor([tokenizer.encode(context, add_special_tokens=False)])
            with torch.inference_mode():
                out = model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=1,
                    do_sample=False,
                    output_scores=True,
                    return_dict_in_generate=True,
                )
            log_probs = torch.log_softmax(out.scores[0][0].float(), dim=-1)
            letters = LETTERS[: len(prepared.options)]
            letter_ids = [
                tokenizer.encode(lead + letter, add_special_tokens=False) for letter in letters
            ]
            values = []
            for token_ids in letter_ids:
                # the first token from generate's scores, later ones one step at a time
                total, so_far = float(log_probs[token_ids[0]]), ids[0].tolist()
                for previous, token in pairwise(token_ids):
                    so_far.append(previous)
                    with torch.inference_mode():
                        step = model(input_ids=torch.tensor([so_far])).logits[0, -1].float()
                    total += float(torch.log_softmax(step, dim=-1)[token])
                values.append(total)
            pick = int(np.argmax(values))
            assert chosen[number] == prepared.options[pick]
            expected.append(question_score(pick, prepared))
        assert score == pytest.approx(float(np.mean(expected)))
    answerer = LmAnswerer(str(directory))
    assert len(answerer.letter_log_likelihoods(SYSTEM_PROMPT, "Caption:\nx\n\nAnswer:", "AB")) == 2
