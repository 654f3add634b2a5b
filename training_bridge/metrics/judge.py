"""Generative judges: a local vision-language model reads the frames and the caption and writes a
score (and, for EXPERT, an explanation per criterion). Two templates:

- ``expert`` — EXPERT's two-stage template (Kim et al., ACL Findings 2025; seed 004
  `/work/shared/seeds/004_f903fcbfc94608d8.txt`, "Method Summary" line 40 and "Mechanism 1"
  line 51; the prompt texts are those of the authors' `expert.py` in `hjkim811/EXPERT`,
  `get_scoring_prompt` and `get_explanation_prompt`, kept word for word because the fine-tuned
  checkpoint was trained on them). Stage 1 asks for a score from 0.0 to 1.0 — the model was trained
  on scores binned at 0.10 (seed 004 line 40) — and stage 2, in the same conversation after the
  score, for one explanation per criterion: fluency, relevance, descriptiveness (the criteria
  Lepus's workers rate). Reference-free.
- ``gveval`` — a rubric prompt in G-VEval's style (Tong et al., AAAI 2025; the authors'
  `evaluation/gveval/prompts/vid/combined.txt` in `ztangaj/gveval`: evaluation criteria, numbered
  evaluation steps, the references, the frames, then "a detailed reason ... ending with ... The
  final score is $N$", N an integer 0-100). Our rubric text is our own and names Lepus's three
  criteria; the answer format is G-VEval's, so the parser reads G-VEval's own outputs too.
  Reference-based (frames + references: G-VEval's "combined" setting).

Scores. EXPERT: `parse_expert_score` keeps what the authors' parser keeps (the digits and dots of
the answer, outer dots stripped), rejects what falls outside [0, 1] (their loop skips it), and
`bin_score` snaps the value to the 0.1 grid the model was trained on (``judge_score=binned``, the
default); ``judge_score=smoothed`` takes their probability smoothing over the digit tokens instead
(seed 004 line 71; `smoothed_expert_score`). G-VEval: `parse_gveval_score` takes the last
``$N$`` with 0 <= N <= 100 (the authors weight the top-5 token probabilities after "$"; not
implemented here: the greedy answer is read).

An answer that does not parse is recorded (`JudgeRecord.score` None); the metric then raises
`MetricUnavailable` naming how many failed and the first bad answer, unless the setting
``judge_unparsed=lowest`` maps them to the bottom of the scale (0.0) — a choice the row shows.

Video: `judge_frames` frames (default 3, G-VEval's three key frames) picked evenly from the
item's sampled frames (`np.linspace` over them, rounded) and given to the model as that many
images in the first user message; an image is a clip of one frame. Identical (clip, caption)
pairs are judged once (as the authors' loop skips a repeated pair).

The model: any transformers checkpoint that `AutoProcessor` and `AutoModelForImageTextToText`
load (LLaVA, Qwen-VL, ...) from a local directory or a model id in the local cache
(`local_files_only=True`; nothing is downloaded); its chat template builds the prompt; decoding is
greedy (`do_sample=False`), as in the authors' code. Torch and transformers are imported only
when the model loads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from training_bridge.metrics.interface import whole_setting
from training_bridge.metrics.standard import MetricUnavailable, OfflineModel

CRITERIA = ("fluency", "relevance", "descriptiveness")
SCORE_STEP = 0.1
TEMPLATES = ("expert", "gveval")
DEFAULT_FRAMES = 3
DEFAULT_MAX_NEW_TOKENS = 512
UNPARSED_POLICIES = ("fail", "lowest")

# EXPERT's prompts (hjkim811/EXPERT, expert.py, get_scoring_prompt / get_explanation_prompt).
EXPERT_SCORING_TEMPLATE = (
    "Evaluate the caption and assign a score on a scale of 0.0 to 1.0.\n\n"
    "Caption: {caption}\n\nScore (0.0~1.0):"
)
EXPERT_EXPLANATION_TEMPLATE = (
    "Provide a brief explanation for the score based on three criteria: Fluency, Relevance, "
    "and Descriptiveness.\n\n"
    "Caption: {caption}\n\n"
    "Evaluation Criteria:\n"
    "- Fluency: Whether the caption is fluent, natural, and grammatically correct.\n"
    "- Relevance: Whether the sentence correctly describes the visual content and be closely "
    "relevant to the image.\n"
    "- Descriptiveness: Whether the sentence is a precise, informative caption that describes "
    "important details of the image.\n\n"
    "Output Format:\n"
    "Fluency: {{Provide explanation here.}}\n"
    "Relevance: {{Provide explanation here.}}\n"
    "Descriptiveness: {{Provide explanation here.}}"
)
# Our rubric in G-VEval's layout (criteria, steps, inputs, response format with "$N$").
GVEVAL_TEMPLATE = (
    "You will be given a caption written for a video. You are shown {frames} frames taken "
    "evenly from the video, and reference captions written by people who watched it.\n\n"
    "Your task is to rate the caption on one scale.\n\n"
    "Evaluation Criteria:\n\n"
    "Score from 0 to 100, judging three things together:\n"
    "- Fluency: the caption reads as natural, grammatical English.\n"
    "- Relevance: everything it states is visible in the frames or supported by the references.\n"
    "- Descriptiveness: it names the important people, objects and actions, as the references "
    "do, without padding.\n\n"
    "Evaluation Steps:\n\n"
    "1. Look at the frames to understand what happens in the video.\n"
    "2. Read the references and note the facts they agree on.\n"
    "3. Compare the caption with the frames and with the references.\n"
    "4. Note errors, omissions of important content and needless detail.\n"
    "5. Give an integer score from 0 to 100.\n\n"
    "Reference Captions:\n{references}\n\n"
    "Caption:\n{caption}\n\n"
    "Response Format:\n\n"
    "First give your reasons, then end with the sentence: The final score is $N$.\n"
    "N must be an integer from 0 to 100 written between dollar signs."
)


def expert_scoring_prompt(caption: str) -> str:
    """EXPERT's stage-1 prompt; the caption's whitespace is collapsed (as the authors' loader
    does, `' '.join(caption.split())`)."""
    return EXPERT_SCORING_TEMPLATE.format(caption=_squash(caption))


def expert_explanation_prompt(caption: str) -> str:
    """EXPERT's stage-2 prompt (asked after the score, in the same conversation)."""
    return EXPERT_EXPLANATION_TEMPLATE.format(caption=_squash(caption))


def gveval_prompt(caption: str, references: Sequence[str], *, frames: int) -> str:
    """The rubric prompt: references quoted and joined as G-VEval's scorer joins them
    (`'a'; 'b'`)."""
    quoted = "; ".join(f"'{_squash(reference)}'" for reference in references)
    return GVEVAL_TEMPLATE.format(frames=frames, references=quoted, caption=_squash(caption))


def _squash(text: str) -> str:
    return " ".join(str(text).split())


def bin_score(value: float, step: float = SCORE_STEP) -> float:
    """`value` snapped to the nearest multiple of `step` (halves go up), e.g. 0.65 -> 0.7."""
    if step <= 0:
        raise ValueError("step must be positive")
    # Work in integer steps so 0.35 / 0.1 = 3.4999... still rounds to 4.
    steps = math.floor(round(value / step, 9) + 0.5)
    return round(steps * step, 10)


def parse_expert_score(text: str, *, step: float = SCORE_STEP) -> float | None:
    """The stage-1 answer as a score in [0, 1] binned at `step`, or None when it does not parse.

    As the authors' parser: every character but digits and dots is dropped, then leading and
    trailing dots; the rest must be one number. A number outside [0, 1] is rejected. Stricter than
    theirs: an answer with no digit, or with two numbers ("0.7 or 0.8" -> "0.70.8"), is None
    instead of an exception."""
    kept = re.sub(r"[^\d.]", "", text or "")
    kept = kept.strip(".")
    if not kept or not re.fullmatch(r"\d+(\.\d+)?", kept):
        return None
    value = float(kept)
    if not 0.0 <= value <= 1.0:
        return None
    return bin_score(value, step)


_GVEVAL_SCORE = re.compile(r"\$\s*(\d{1,3})\s*\$")


def parse_gveval_score(text: str) -> float | None:
    """The last ``$N$`` of a G-VEval-style answer, 0 <= N <= 100, or None."""
    found = [int(match) for match in _GVEVAL_SCORE.findall(text or "")]
    found = [value for value in found if 0 <= value <= 100]
    return float(found[-1]) if found else None


_CRITERION_LINE = re.compile(
    r"^\s*[-*#\s]*\**\s*(fluency|relevance|descriptiveness)\s*\**\s*:\s*\**\s*(.*)$",
    re.IGNORECASE,
)


def parse_explanation(text: str) -> dict[str, str] | None:
    """{fluency, relevance, descriptiveness: explanation} from a stage-2 answer, or None.

    The authors' regex wants the three labels in order, one per line; this also accepts them in
    any order, in any case, with list marks or bold (``- **Relevance:** ...``), and lets an
    explanation run over several lines until the next label. Every criterion must be present and
    non-empty, and none twice."""
    found: dict[str, list[str]] = {}
    current: str | None = None
    for line in (text or "").splitlines():
        match = _CRITERION_LINE.match(line)
        if match:
            current = match.group(1).lower()
            if current in found:
                return None
            found[current] = [match.group(2).strip().strip("*").strip()]
        elif current is not None:
            found[current].append(line.strip())
    explanation = {
        name: " ".join(part for part in found.get(name, []) if part) for name in CRITERIA
    }
    if any(not value for value in explanation.values()):
        return None
    return explanation


def pick_frames(frames: np.ndarray, count: int) -> list[np.ndarray]:
    """`count` frames spread evenly over a (T, H, W, 3) array (all of them when T <= count)."""
    array = np.asarray(frames)
    if array.ndim == 3:  # one image
        array = array[None]
    if array.ndim != 4 or array.shape[0] == 0:
        raise ValueError("frames must be a non-empty (T, H, W, 3) array")
    total = array.shape[0]
    if total <= count:
        return [array[i] for i in range(total)]
    indices = np.round(np.linspace(0, total - 1, count)).astype(int)
    return [array[i] for i in indices]


DIGITS = "0123456789"
SCORE_MODES = ("binned", "smoothed")


@dataclass(frozen=True)
class Step:
    """One generated token: its text and the probability of each digit token at that step."""

    text: str
    digits: Mapping[str, float]


def smoothed_expert_score(steps: Sequence[Step]) -> float | None:
    """EXPERT's score smoothing (seed 004 line 71: s = Σ_j 10^-j Σ_i i·p(i, j); the authors'
    `expert.py`): the expected value of the digit tokens at the tenths step, plus 0.01 × that of
    the hundredths step when the answer has one; an answer of 1 (or 1.0) is 0.9·p("0") + p("1")
    at the step of its "1", as theirs. The steps are found by position — the first single-digit
    token after the token holding the point, and the one right after it — where the authors search
    the answer for the token id of the digit. None when the answer is no score in [0, 1] or has no
    such digit step (e.g. "0" alone)."""
    text = "".join(step.text for step in steps)
    kept = re.sub(r"[^\d.]", "", text).strip(".")
    if not kept or not re.fullmatch(r"\d+(\.\d+)?", kept) or not 0.0 <= float(kept) <= 1.0:
        return None
    if float(kept) == 1.0:
        one = next((step for step in steps if step.text.strip() == "1"), None)
        if one is None:
            return None
        return 0.9 * one.digits.get("0", 0.0) + one.digits.get("1", 0.0)
    point = next((index for index, step in enumerate(steps) if "." in step.text), None)
    if point is None:
        return None
    digits_after = [
        index
        for index in range(point + 1, len(steps))
        if len(steps[index].text.strip()) == 1 and steps[index].text.strip().isdigit()
    ]
    if not digits_after:
        return None

    def expected(step: Step) -> float:
        return sum(int(digit) * step.digits.get(digit, 0.0) for digit in DIGITS)

    tenths = digits_after[0]
    score = 0.1 * expected(steps[tenths])
    if tenths + 1 in digits_after:
        score += 0.01 * expected(steps[tenths + 1])
    return score


class Vlm(Protocol):
    """What a judge needs from a model: the assistant's next answer to a conversation whose first
    user message carries `images`."""

    def generate(
        self, messages: Sequence[tuple[str, str]], images: Sequence[np.ndarray]
    ) -> str: ...


class TransformersVlm(OfflineModel):
    """A local transformers vision-language model (see the module docstring), loaded lazily."""

    what = "judge"
    processor = "AutoProcessor"
    model_class = "AutoModelForImageTextToText"

    def __init__(
        self, model: str, *, device: str = "cpu", max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    ) -> None:
        super().__init__(model, device=device)
        self.max_new_tokens = max_new_tokens

    def render(self, messages: Sequence[tuple[str, str]], image_count: int) -> str:
        """The prompt text the chat template makes of `messages` (images in the first turn)."""
        processor, _ = self._load()
        return str(
            processor.apply_chat_template(
                chat_messages(messages, image_count), add_generation_prompt=True, tokenize=False
            )
        )

    def generate(self, messages: Sequence[tuple[str, str]], images: Sequence[np.ndarray]) -> str:
        return self.generate_scored(messages, images)[0]

    def generate_scored(
        self, messages: Sequence[tuple[str, str]], images: Sequence[np.ndarray]
    ) -> tuple[str, list[Step]]:
        """The greedy answer and, per generated token, its text and the probabilities of the
        digit tokens "0".."9" (softmax of the raw logits over the whole vocabulary; each digit's
        id is the last of its encoding, as the EXPERT authors take it)."""
        import torch

        processor, model = self._load()
        tokenizer = processor.tokenizer
        text = self.render(messages, len(images))
        inputs = processor(text=[text], images=list(images) or None, return_tensors="pt")
        inputs = {key: value.to(self.device) for key, value in inputs.items()}
        with torch.inference_mode():
            output = model.generate(
                **inputs,
                do_sample=False,
                num_beams=1,
                max_new_tokens=self.max_new_tokens,
                output_logits=True,
                return_dict_in_generate=True,
            )
        new_tokens = output.sequences[0, inputs["input_ids"].shape[1] :]
        digit_ids = [int(tokenizer.encode(digit, add_special_tokens=False)[-1]) for digit in DIGITS]
        steps = []
        for token, logits in zip(new_tokens.tolist(), output.logits, strict=False):
            probabilities = torch.softmax(logits[0].float(), dim=-1)
            steps.append(
                Step(
                    str(tokenizer.decode([token], skip_special_tokens=True)),
                    {
                        digit: float(probabilities[i])
                        for digit, i in zip(DIGITS, digit_ids, strict=True)
                    },
                )
            )
        answer = str(tokenizer.decode(new_tokens, skip_special_tokens=True)).strip()
        return answer, steps


def chat_messages(messages: Sequence[tuple[str, str]], image_count: int) -> list[dict[str, Any]]:
    """(role, text) turns as chat-template messages; the first user turn opens with the images."""
    rendered: list[dict[str, Any]] = []
    for index, (role, text) in enumerate(messages):
        parts: list[dict[str, Any]] = []
        if index == 0:
            parts.extend({"type": "image"} for _ in range(image_count))
        parts.append({"type": "text", "text": text})
        rendered.append({"role": role, "content": parts})
    return rendered


@dataclass(frozen=True)
class JudgeRecord:
    """One judged (clip, caption): the answers as written and what was read from them."""

    score_answer: str
    score: float | None
    explanation_answer: str = ""
    explanation: dict[str, str] | None = None


@dataclass
class JudgeMetric:
    """A generative judge as a `CaptionMetric` (see the module docstring). After `score`,
    `records` holds one `JudgeRecord` per item, in order."""

    name: str
    vlm: Vlm
    template: str = "expert"
    frames: int = DEFAULT_FRAMES
    explanations: bool = True
    unparsed: str = "fail"
    score_mode: str = "binned"  # EXPERT only: "binned" greedy answer, or "smoothed"
    label: str = ""
    needs_references: bool = False
    needs_video: bool = True
    records: list[JudgeRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown judge template {self.template!r}; known: {TEMPLATES}")
        if self.unparsed not in UNPARSED_POLICIES:
            raise ValueError(f"judge_unparsed must be one of {', '.join(UNPARSED_POLICIES)}")
        if self.score_mode not in SCORE_MODES:
            raise ValueError(f"judge_score must be one of {', '.join(SCORE_MODES)}")
        self.needs_references = self.template == "gveval"
        self.label = self.label or (
            "EXPERT (judge)" if self.template == "expert" else "G-VEval style (judge)"
        )

    def judge(
        self, caption: str, references: Sequence[str], images: Sequence[np.ndarray]
    ) -> JudgeRecord:
        """Judge one caption on its frames: the template's conversation, answers parsed."""
        if self.template == "gveval":
            answer = self.vlm.generate(
                [("user", gveval_prompt(caption, references, frames=len(images)))], images
            )
            return JudgeRecord(answer, parse_gveval_score(answer))
        first = expert_scoring_prompt(caption)
        if self.score_mode == "smoothed":
            scored = getattr(self.vlm, "generate_scored", None)
            if scored is None:
                raise MetricUnavailable("judge_score=smoothed needs the digit probabilities")
            answer, steps = scored([("user", first)], images)
            score = smoothed_expert_score(steps)
            said = answer if score is None else str(round(score, 4))
        else:
            answer = self.vlm.generate([("user", first)], images)
            score = parse_expert_score(answer)
            said = answer if score is None else f"{score:.1f}"
        if not self.explanations:
            return JudgeRecord(answer, score)
        # Stage 2 follows the score in the same conversation (the authors put their smoothed
        # score back as the assistant's turn; ours is the score read, or the raw answer if none).
        messages = [
            ("user", first),
            ("assistant", said),
            ("user", expert_explanation_prompt(caption)),
        ]
        explained = self.vlm.generate(messages, images)
        return JudgeRecord(answer, score, explained, parse_explanation(explained))

    def score(self, items: Sequence[Any]) -> list[float]:
        judged: dict[tuple[str, str, tuple[str, ...]], JudgeRecord] = {}
        records: list[JudgeRecord] = []
        frames_of: dict[str, list[np.ndarray]] = {}
        for item in items:
            if item.video is None:
                raise MetricUnavailable(f"{self.name} needs the frames of every candidate")
            references = tuple(item.references) if self.needs_references else ()
            key = (item.video.key, _squash(item.candidate), references)
            if key not in judged:
                if item.video.key not in frames_of:
                    frames_of[item.video.key] = pick_frames(item.video.load(), self.frames)
                judged[key] = self.judge(item.candidate, references, frames_of[item.video.key])
            records.append(judged[key])
        self.records = records
        bad = [record for record in records if record.score is None]
        if bad and self.unparsed == "fail":
            raise MetricUnavailable(
                f"{len(bad)} of {len(records)} judge answers have no readable score "
                f"(first: {bad[0].score_answer[:120]!r}); set judge_unparsed=lowest to score them 0"
            )
        return [0.0 if record.score is None else float(record.score) for record in records]


JUDGE_METRIC_NAMES = ("expert_judge", "gveval_judge")
JUDGE_SETTING_KEYS = (
    "judge_model",
    "judge_frames",
    "judge_explanations",
    "judge_unparsed",
    "judge_max_new_tokens",
    "judge_score",
)


def judge_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``judge_*`` settings, typed (ValueError on a bad value)."""
    explain = str(settings.get("judge_explanations") or "true").strip().lower()
    if explain not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"judge_explanations must be true or false, not {explain!r}")
    unparsed = str(settings.get("judge_unparsed") or "fail").strip().lower()
    if unparsed not in UNPARSED_POLICIES:
        raise ValueError(f"judge_unparsed must be one of {', '.join(UNPARSED_POLICIES)}")
    score_mode = str(settings.get("judge_score") or "binned").strip().lower()
    if score_mode not in SCORE_MODES:
        raise ValueError(f"judge_score must be one of {', '.join(SCORE_MODES)}")
    return {
        "score_mode": score_mode,
        "frames": _whole(settings.get("judge_frames"), DEFAULT_FRAMES, "judge_frames"),
        "max_new_tokens": _whole(
            settings.get("judge_max_new_tokens"), DEFAULT_MAX_NEW_TOKENS, "judge_max_new_tokens"
        ),
        "explanations": explain in ("true", "1", "yes"),
        "unparsed": unparsed,
    }


def judge_metric(name: str, model: str, options: Mapping[str, Any], *, device: str) -> JudgeMetric:
    """The judge `name` on the VLM `model` with `judge_options`; the model loads on the first
    answer."""
    if name not in JUDGE_METRIC_NAMES:
        raise ValueError(f"unknown judge {name!r}")
    return JudgeMetric(
        name,
        TransformersVlm(model, device=device, max_new_tokens=options["max_new_tokens"]),
        template="expert" if name == "expert_judge" else "gveval",
        frames=options["frames"],
        explanations=options["explanations"],
        unparsed=options["unparsed"],
        score_mode=options["score_mode"],
    )


def _whole(value: Any, default: int, key: str) -> int:
    # A blank field of the page's form means "not given" here.
    return whole_setting(None if value is None or str(value).strip() == "" else value, default, key)
