"""Prompts for Rigel's video and still-image caption evaluation, in our own wording.

Two conditions, as in the paper (Section 3): *reference-based* (the video, the human reference
captions and the candidate) and *reference-free* (the video and the candidate only). Both use the
five rubric levels of the paper's Appendix C (the same texts the annotation campaigns show to crowd
workers, ``annotation.questions.RUBRIC_LEVELS``; copied here so this module needs no Django app, and
a test keeps the two in sync).

The prompt is a single user turn (video first, then the text) rendered with the backbone
tokenizer's chat template, followed by the opened assistant turn: the next token the model writes
is the score digit "1".."5".

Two layouts of the same texts (``PROMPT_LAYOUTS``), ours (the paper's order is not readable):

- ``"candidate-last"`` (the default of new runs, issue 29): intro, references, question, rubric,
  answer format, then the candidate. Everything before the candidate is the same for every
  candidate of a clip, so the scoring engine's shared prefix (``engine/prefix.py``) holds the
  rubric too, and each candidate costs its own ~15 tokens plus the assistant header instead of
  ~215 (docs/benchmarks.md, issue 29 point 2).
- ``"rubric-last"`` (``LEGACY_LAYOUT``): the order of every run trained before layouts existed —
  the candidate, then the question, the rubric and the answer format. A stored run or run spec
  without a ``prompt_layout`` setting is such a run and keeps this order
  (``config.with_stored_layout``): a model is scored with the prompt it was trained on.

Still images (``modality="image"``) have prompts of their own, as in the paper: its Appendix G
"provides the full prompts for all four settings: reference-free and reference-based video
captioning, and reference-free and reference-based image captioning" (seed 000, line 306), but the
prompts themselves are not readable in our copy of the paper. The image wording is therefore
*ours*: the video prompt with "image" for "video" (the same rubric, the same question), and the
image goes where the video goes, as Qwen-VL's image placeholder (``{"type": "image"}``, see
``images.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .modality import VIDEO, check_modality

# (value, label, description), best first. Keep equal to annotation.questions.RUBRIC_LEVELS.
RUBRIC_LEVELS: tuple[tuple[int, str, str], ...] = (
    (
        5,
        "Excellent",
        "Comprehensively and accurately describes all observed objects, relationships "
        "and contextual details, with no grammatical errors or at most one minor "
        "error.",
    ),
    (
        4,
        "Good",
        "Describes most objects and relationships with only minor omissions or "
        "inaccuracies, and is generally natural and comprehensible.",
    ),
    (
        3,
        "Fair",
        "Mentions key objects but lacks detail in relationships or other attributes, "
        "or contains significant inaccuracies or noticeable grammatical errors, yet "
        "remains understandable.",
    ),
    (
        2,
        "Poor",
        "Describes a few objects but omits significant details, contains numerous "
        "inaccuracies, or has errors that make it difficult to read.",
    ),
    (
        1,
        "Bad",
        "Minimal description, fundamentally unrelated to the video, or frequent "
        "errors that make it incomprehensible.",
    ),
)

SCORE_DIGITS: tuple[str, ...] = ("1", "2", "3", "4", "5")

CANDIDATE_LAST = "candidate-last"
LEGACY_LAYOUT = "rubric-last"
PROMPT_LAYOUTS: tuple[str, ...] = (CANDIDATE_LAST, LEGACY_LAYOUT)
DEFAULT_LAYOUT = CANDIDATE_LAST


def check_layout(layout: str) -> str:
    if layout not in PROMPT_LAYOUTS:
        raise ValueError(
            f"unknown prompt layout {layout!r}; choose one of {', '.join(PROMPT_LAYOUTS)}"
        )
    return layout


_INTRO_REFERENCE_BASED = (
    "You will judge how good a caption is for the video shown above. "
    "People who watched the video wrote the reference captions below; use them, together with "
    "what you see, to decide what the video really shows."
)
_INTRO_REFERENCE_FREE = (
    "You will judge how good a caption is for the video shown above, "
    "using only what you see in the video."
)
_QUESTION = (
    "Rate the candidate caption on a scale of 1 to 5, following this rubric. Consider whether "
    "it mentions the objects, actions and relationships that matter, whether everything it says "
    "is really in the video, and whether it reads as natural English."
)
_ANSWER_FORMAT = "Reply with one digit from 1 to 5 and nothing else."

# ours (the paper's Appendix G image prompts are not readable in our copy, line 306): the video
# wording with the visual input named an image.
_IMAGE_WORDS = (("watched the video", "looked at the image"), ("video", "image"))


def _for_modality(text: str, modality: str) -> str:
    if check_modality(modality) == VIDEO:
        return text
    for old, new in _IMAGE_WORDS:
        text = text.replace(old, new)
    return text


def rubric_text(modality: str = VIDEO) -> str:
    return "\n".join(
        f"{value} ({label}): {_for_modality(description, modality)}"
        for value, label, description in RUBRIC_LEVELS
    )


def prompt_text(
    *,
    references: Sequence[str],
    candidate: str,
    reference_free: bool,
    modality: str = VIDEO,
    layout: str = DEFAULT_LAYOUT,
) -> str:
    """The text part of the user turn (what follows the video or the image), in ``layout``'s
    order (module docstring)."""
    intro = _INTRO_REFERENCE_FREE if reference_free else _INTRO_REFERENCE_BASED
    parts: list[str] = [_for_modality(intro, modality)]
    if not reference_free:
        if not references:
            raise ValueError("the reference-based prompt needs at least one reference caption")
        lines = "\n".join(f"{i}. {_clean(ref)}" for i, ref in enumerate(references, start=1))
        parts.append(f"Reference captions:\n{lines}")
    rubric = f"{_for_modality(_QUESTION, modality)}\n{rubric_text(modality)}"
    candidate_part = f"Candidate caption: {_clean(candidate)}"
    if check_layout(layout) == LEGACY_LAYOUT:
        parts.extend((candidate_part, rubric, _ANSWER_FORMAT))
    else:
        parts.extend((rubric, _ANSWER_FORMAT, candidate_part))
    return "\n\n".join(parts)


def render_prompt(tokenizer: Any, *, modality: str = VIDEO, **parts: Any) -> str:
    """The full prompt string: one user turn holding the video (or the image) and
    :func:`prompt_text` of ``parts`` (references, candidate, reference_free, layout), with one
    ``<|video_pad|>`` (an image: ``<|image_pad|>``) placeholder (the processor expands it),
    ending with the opened assistant turn so that the next token is the score digit."""
    text = prompt_text(modality=modality, **parts)
    content = [{"type": modality}, {"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def prompt_corpus() -> list[str]:
    """Texts that the locally built tokenizers are trained on (with captions, see backbone)."""
    return [
        _INTRO_REFERENCE_BASED,
        _INTRO_REFERENCE_FREE,
        _QUESTION,
        _ANSWER_FORMAT,
        rubric_text(),
        "Reference captions:",
        "Candidate caption:",
    ]


def _clean(text: str) -> str:
    return " ".join(str(text).split())
