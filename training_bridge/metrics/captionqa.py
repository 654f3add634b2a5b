"""CaptionQA: a caption is worth what a language model can answer about the clip from the caption
alone (Yang et al., 2025, "CaptionQA: Is Your Caption as Useful as the Image Itself?", arXiv
2511.21025; seed 003 `/work/shared/seeds/003_d7fd47d7898fcc01.txt`, lines 76-83, "CaptionQA —
judge-decided correct-letter rate"; the authors' `qa.py` in `bronyayang/CaptionQA`).

Per question (`prepare`): the choices, plus "Cannot answer from the caption" for a question that
is not a yes/no question (`qa.py`, `add_cannot_answer_option`), shuffled by a seeded generator;
the prompt (`render_prompt`) is the authors' system line and their
``Caption: / Question: / Options: A. ... / Answer:`` layout (`qa.py`, `build_caption_qa_prompt`).

Per candidate: the mean of its clip's question scores. ``captionqa_scoring``:

- ``accuracy`` (default): 1 for the right letter, else 0 — "Cannot answer" counts 0 (seed 003,
  line 80: `captionqa_score = mean(per_question_scores)`, "Cannot answer counts as 0");
- ``partial``: as the authors' `qa.py` scores it — "Cannot answer" earns 1/n + 0.05, n the number
  of the question's own choices.

The answerer (`LmAnswerer`): a local causal language model (`AutoModelForCausalLM`, local files
only) that **scores each option letter by its log-likelihood** as the answer — the sum of the
log-probabilities of the letter's tokens after the prompt (after the chat template's assistant
turn when the tokenizer has one) — and picks the most likely. Not generation: the authors let the
judge LLM write up to 4 tokens and read a letter out of them, which needs a model that follows
the format; likelihood ranking always yields one of the offered letters, is deterministic, needs
no answer parser, and on a model that does follow the format picks the letter it would have
written first when greedy. Questions: a JSON file ``{clip key: [{"question", "choices",
"answer"}]}`` (the authors' question file layout; "answer" is the text of the right choice), clip
key = the clip's VATEX id (`Video.key`). Clips without questions make the metric unavailable,
with the count.

Differences from `qa.py`: the shuffle is seeded per question (seed, clip key, question number), so
a candidate's score does not depend on which others are scored with it; a yes/no question is one
whose choices are exactly yes and no (any case) or that starts with an auxiliary verb — `qa.py`
tests "yes"/"no" as substrings of any choice, so "north" counts as a "no" there.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from training_bridge.metrics.standard import MetricUnavailable, OfflineModel

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CANNOT_ANSWER = "Cannot answer from the caption"
SYSTEM_PROMPT = (
    "You are given a caption describing an image, and a question about the image. "
    "Answer with a SINGLE LETTER (A, B, C, ...), no explanation."
)
SCORINGS = ("accuracy", "partial")
_YES_NO_STARTS = (
    "is ", "are ", "was ", "were ", "do ", "does ", "did ", "have ", "has ", "had ",
    "can ", "could ", "will ", "would ", "should ", "shall ", "may ", "might ", "must ",
)  # fmt: skip


@dataclass(frozen=True)
class Question:
    question: str
    choices: tuple[str, ...]
    answer: str  # the text of the right choice


@dataclass(frozen=True)
class PreparedQuestion:
    """A question as asked: its options in order, the right one and the "cannot answer" one."""

    question: Question
    options: tuple[str, ...]
    correct: int
    cannot: int | None  # index of "Cannot answer", None for a yes/no question


def read_questions(path: str | Path) -> dict[str, list[Question]]:
    """The question file (see the module docstring); raises ValueError on a malformed one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"captionqa_questions={path}: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"captionqa_questions={path}: expected {{clip key: [questions]}}")
    bank: dict[str, list[Question]] = {}
    for key, entries in data.items():
        if not isinstance(entries, list):
            raise ValueError(f"captionqa_questions: {key!r} must map to a list of questions")
        questions = []
        for number, entry in enumerate(entries):
            where = f"captionqa_questions: {key!r} question {number}"
            if not isinstance(entry, dict):
                raise ValueError(f"{where}: not an object")
            text, choices, answer = entry.get("question"), entry.get("choices"), entry.get("answer")
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{where}: no question text")
            if not isinstance(choices, list) or len(choices) < 2:
                raise ValueError(f"{where}: needs at least two choices")
            texts = tuple(str(choice).strip() for choice in choices)
            if len(texts) + 1 > len(LETTERS):
                raise ValueError(f"{where}: too many choices")
            if not isinstance(answer, str) or answer.strip() not in texts:
                raise ValueError(f"{where}: the answer must be the text of one of its choices")
            questions.append(Question(text.strip(), texts, answer.strip()))
        bank[str(key)] = questions
    return bank


def is_yes_no(question: Question) -> bool:
    choices = {choice.lower() for choice in question.choices}
    if {"yes", "no"} <= choices:
        return True
    return question.question.strip().lower().startswith(_YES_NO_STARTS)


def prepare(question: Question, *, seed: int, key: str, number: int) -> PreparedQuestion:
    """The options as asked: "Cannot answer" added unless yes/no, then a seeded shuffle."""
    options = list(question.choices)
    if not is_yes_no(question):
        options.append(CANNOT_ANSWER)
    order = list(range(len(options)))
    random.Random(f"{seed}:{key}:{number}").shuffle(order)
    shuffled = tuple(options[i] for i in order)
    correct = shuffled.index(question.answer)
    cannot = shuffled.index(CANNOT_ANSWER) if CANNOT_ANSWER in shuffled else None
    return PreparedQuestion(question, shuffled, correct, cannot)


def render_prompt(caption: str, prepared: PreparedQuestion) -> str:
    """The user message (the system line goes separately, `SYSTEM_PROMPT`)."""
    lines = "\n".join(f"{LETTERS[i]}. {option}" for i, option in enumerate(prepared.options))
    return (
        f"Caption:\n{caption}\n\nQuestion:\n{prepared.question.question}\n\n"
        f"Options:\n{lines}\n\nAnswer:"
    )


def question_score(chosen: int, prepared: PreparedQuestion, scoring: str = "accuracy") -> float:
    """1 for the right option; "Cannot answer" 1/n + 0.05 under ``partial`` (n = the question's
    own choices), else 0."""
    if scoring not in SCORINGS:
        raise ValueError(f"captionqa_scoring must be one of {', '.join(SCORINGS)}")
    if chosen == prepared.correct:
        return 1.0
    if scoring == "partial" and chosen == prepared.cannot:
        return 1.0 / len(prepared.question.choices) + 0.05
    return 0.0


class Answerer(Protocol):
    """Picks one of `letters` as the answer to the prompt (an index into `letters`)."""

    def choose(self, system: str, prompt: str, letters: Sequence[str]) -> int: ...


class LmAnswerer(OfflineModel):
    """A local causal LM ranking the letters by log-likelihood (see the module docstring)."""

    what = "CaptionQA"
    processor = "AutoTokenizer"
    model_class = "AutoModelForCausalLM"

    def context(self, system: str, prompt: str) -> tuple[str, str]:
        """(the text before the answer, what goes before the letter): the chat template's
        assistant turn when the tokenizer has one, else the plain text and a space."""
        tokenizer, _ = self._load()
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(
                [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
                add_generation_prompt=True,
                tokenize=False,
            )
            return str(text), ""
        return f"{system}\n\n{prompt}", " "

    def letter_log_likelihoods(
        self, system: str, prompt: str, letters: Sequence[str]
    ) -> list[float]:
        """log p(letter | context) for each letter: the sum over the letter's tokens."""
        import torch

        tokenizer, model = self._load()
        context, lead = self.context(system, prompt)
        context_ids = tokenizer.encode(context, add_special_tokens=False)
        scores = []
        for letter in letters:
            answer_ids = tokenizer.encode(lead + letter, add_special_tokens=False)
            ids = torch.tensor([context_ids + answer_ids], device=self.device)
            with torch.inference_mode():
                logits = model(input_ids=ids).logits[0].float()
            log_probs = torch.log_softmax(logits, dim=-1)
            start = len(context_ids)
            total = sum(
                float(log_probs[start + offset - 1, token])
                for offset, token in enumerate(answer_ids)
            )
            scores.append(total)
        return scores

    def choose(self, system: str, prompt: str, letters: Sequence[str]) -> int:
        scores = self.letter_log_likelihoods(system, prompt, letters)
        return max(range(len(scores)), key=lambda index: (scores[index], -index))


@dataclass
class CaptionQAMetric:
    """CaptionQA as a `CaptionMetric`. Reads each item's clip key (`item.video.key`; the frames
    are never loaded). After `score`, `answers` holds, per item, the chosen option of each of its
    clip's questions."""

    questions: Mapping[str, Sequence[Question]]
    answerer: Answerer
    scoring: str = "accuracy"
    seed: int = 0
    name: str = "captionqa"
    label: str = "CaptionQA"
    needs_references: bool = False
    needs_video: bool = True
    answers: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.scoring not in SCORINGS:
            raise ValueError(f"captionqa_scoring must be one of {', '.join(SCORINGS)}")

    def caption_score(self, caption: str, key: str) -> tuple[float, list[str]]:
        """The mean question score of `caption` over clip `key`'s questions, and the options it
        chose."""
        scores, chosen_options = [], []
        for number, question in enumerate(self.questions[key]):
            prepared = prepare(question, seed=self.seed, key=key, number=number)
            letters = LETTERS[: len(prepared.options)]
            chosen = self.answerer.choose(SYSTEM_PROMPT, render_prompt(caption, prepared), letters)
            scores.append(question_score(chosen, prepared, self.scoring))
            chosen_options.append(prepared.options[chosen])
        return sum(scores) / len(scores), chosen_options

    def score(self, items: Sequence[Any]) -> list[float]:
        keys = [item.video.key if item.video is not None else None for item in items]
        missing = sum(key is None or not self.questions.get(key) for key in keys)
        if missing:
            raise MetricUnavailable(
                f"CaptionQA has no questions for {missing} of {len(items)} candidates' clips "
                "(captionqa_questions maps clip keys to questions)"
            )
        done: dict[tuple[str, str], tuple[float, list[str]]] = {}
        values, answers = [], []
        for item, key in zip(items, keys, strict=True):
            assert key is not None
            pair = (key, item.candidate)
            if pair not in done:
                done[pair] = self.caption_score(item.candidate, key)
            values.append(done[pair][0])
            answers.append(done[pair][1])
        self.answers = answers
        return values


CAPTIONQA_SETTING_KEYS = (
    "captionqa_model",
    "captionqa_questions",
    "captionqa_scoring",
    "captionqa_seed",
)


def captionqa_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``captionqa_*`` settings but the model, typed (ValueError on a bad value)."""
    scoring = str(settings.get("captionqa_scoring") or "accuracy").strip().lower()
    if scoring not in SCORINGS:
        raise ValueError(f"captionqa_scoring must be one of {', '.join(SCORINGS)}")
    seed_text = str(settings.get("captionqa_seed") or "0").strip()
    try:
        seed = int(seed_text)
    except ValueError:
        raise ValueError(f"captionqa_seed must be a whole number, not {seed_text!r}") from None
    path = str(settings.get("captionqa_questions") or "").strip()
    return {"scoring": scoring, "seed": seed, "questions": path}


def captionqa_metric(model: str, options: Mapping[str, Any], *, device: str) -> CaptionQAMetric:
    """CaptionQA on the LM `model` with `captionqa_options`; MetricUnavailable when the question
    file is missing, ValueError when it is malformed."""
    path = options["questions"]
    if not path:
        raise MetricUnavailable(
            "no questions given: set captionqa_questions=FILE ({clip key: [questions]})"
        )
    if not Path(path).expanduser().is_file():
        raise MetricUnavailable(f"captionqa_questions={path}: no such file")
    return CaptionQAMetric(
        read_questions(Path(path).expanduser()),
        LmAnswerer(model, device=device),
        scoring=options["scoring"],
        seed=options["seed"],
    )
