"""Rating questions and the rubrics that describe their levels.

The default questions are the three criteria of the Rigel paper (descriptiveness, relevance,
fluency), each on 1–5. Which words describe the five levels is the campaign's rubric
(`Campaign.rubric`):

- `paper`: the paper's Appendix C gives one holistic rubric for all three dimensions (each level
  speaks of objects, relationships, accuracy and grammar at once). Vid-Lepus was collected with it,
  so it stays available, and a release's card says which campaigns used it. Shown under fluency it
  reads "fundamentally unrelated to the video" for 1, and under relevance it asks for "no
  grammatical errors" for 5.
- `per_criterion`: level descriptions written for each question on its own — our wording, not the
  paper's — so each question shows only what it asks about (a question of the curator's own gets
  levels that speak of "what this question asks"). The default for new campaigns.
- `custom`: the curator gives every question its own levels.
- `imported`: judgments imported from a file (e.g. VATEX-EVAL); they were collected under their
  source's instructions, not under a Lepus rubric.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class Rubric(models.TextChoices):
    PAPER = "paper", "The Rigel paper's rubric (Appendix C): one holistic rubric for every question"
    PER_CRITERION = "per_criterion", "Per-criterion levels (Lepus's own wording, not the paper's)"
    CUSTOM = "custom", "Custom levels given with each question"
    IMPORTED = "imported", "Imported judgments (rated under their source's own instructions)"


# The paper's Appendix C, level by level (best first). training_bridge.rigel.prompts keeps a copy.
PAPER_LEVELS: list[dict[str, Any]] = [
    {
        "value": 5,
        "label": "Excellent",
        "description": "Comprehensively and accurately describes all observed objects, relationships "
        "and contextual details, with no grammatical errors or at most one minor "
        "error.",
    },
    {
        "value": 4,
        "label": "Good",
        "description": "Describes most objects and relationships with only minor omissions or "
        "inaccuracies, and is generally natural and comprehensible.",
    },
    {
        "value": 3,
        "label": "Fair",
        "description": "Mentions key objects but lacks detail in relationships or other attributes, "
        "or contains significant inaccuracies or noticeable grammatical errors, yet "
        "remains understandable.",
    },
    {
        "value": 2,
        "label": "Poor",
        "description": "Describes a few objects but omits significant details, contains numerous "
        "inaccuracies, or has errors that make it difficult to read.",
    },
    {
        "value": 1,
        "label": "Bad",
        "description": "Minimal description, fundamentally unrelated to the video, or frequent "
        "errors that make it incomprehensible.",
    },
]
# The name the rest of the code and training_bridge.rigel.prompts know the paper's levels by.
RUBRIC_LEVELS = PAPER_LEVELS

_LABELS = ("Excellent", "Good", "Fair", "Poor", "Bad")


def _levels(*descriptions: str) -> list[dict[str, Any]]:
    """Five levels, best first, with the paper's labels and these descriptions."""
    return [
        {"value": 5 - index, "label": label, "description": description}
        for index, (label, description) in enumerate(zip(_LABELS, descriptions, strict=True))
    ]


# Our own wording (not the paper's): each question's levels speak of what that question asks.
PER_CRITERION_LEVELS: dict[str, list[dict[str, Any]]] = {
    "descriptiveness": _levels(
        "Covers every object, action, relationship and detail of the setting that matters in "
        "the clip.",
        "Covers most of what matters; only minor details are missing.",
        "Names the main objects or action but leaves out relationships, attributes or the setting.",
        "Mentions only a little of what happens; important content is missing.",
        "Says almost nothing about what happens in the clip.",
    ),
    "relevance": _levels(
        "Everything the caption says is in the clip; nothing is wrong or invented.",
        "Correct apart from one small inaccuracy (a detail, a colour, a number).",
        "Mostly about the clip, but an object, action or relationship is clearly wrong.",
        "Several statements are wrong or not in the clip.",
        "Unrelated to the clip, or mostly wrong.",
    ),
    "fluency": _levels(
        "Natural, grammatical English that reads easily.",
        "Reads well, with at most one small slip (e.g. a missing article).",
        "Noticeable grammatical errors or awkward wording, but easy to understand.",
        "Errors make it hard to read; the meaning has to be guessed in places.",
        "Broken or incomprehensible text.",
    ),
    "overall": _levels(
        "An accurate, complete and well-written description of the clip.",
        "Accurate and readable, with minor omissions or slips.",
        "Gets the gist, but misses important content, has a clear error or reads awkwardly.",
        "Mostly incomplete, wrong or hard to read.",
        "Unrelated to the clip, or unreadable.",
    ),
}

# A question of the curator's own under the per-criterion rubric: levels about that question.
PER_CRITERION_OTHER_LEVELS = _levels(
    "Fully meets what this question asks.",
    "Meets it, with minor shortcomings.",
    "Partly meets it, with clear shortcomings.",
    "Meets it only a little.",
    "Does not meet it at all.",
)

DEFAULT_QUESTIONS: list[dict[str, Any]] = [
    {
        "key": "descriptiveness",
        "label": "Descriptiveness",
        "help": "Does the caption describe the objects, actions, relationships and context that "
        "matter in the clip?",
    },
    {
        "key": "relevance",
        "label": "Relevance",
        "help": "Is what the caption says actually in the clip (no wrong objects or actions)?",
    },
    {
        "key": "fluency",
        "label": "Fluency",
        "help": "Is the caption natural, grammatical English that reads easily?",
    },
]

OVERALL_ONLY_QUESTIONS: list[dict[str, Any]] = [
    {"key": "overall", "label": "Overall", "help": "Overall quality of the caption for the clip."},
]


def rubric_levels(rubric: str, key: str) -> list[dict[str, Any]] | None:
    """The levels `rubric` gives the question `key` (a fresh copy, best first); None for the
    custom rubric, whose questions give their own."""
    if rubric in (Rubric.PAPER, Rubric.IMPORTED):
        levels = PAPER_LEVELS
    elif rubric == Rubric.PER_CRITERION:
        levels = PER_CRITERION_LEVELS.get(key, PER_CRITERION_OTHER_LEVELS)
    else:
        return None
    return [dict(level) for level in levels]


def with_levels(
    questions: list[dict[str, Any]], rubric: str = Rubric.PER_CRITERION
) -> list[dict[str, Any]]:
    """Questions with the rubric's levels attached (a fresh copy). A question the rubric does not
    describe keeps the levels it has (a custom rubric must give them)."""
    return [
        {**question, "levels": rubric_levels(rubric, question["key"]) or question.get("levels")}
        for question in questions
    ]


def default_questions(rubric: str = Rubric.PER_CRITERION) -> list[dict[str, Any]]:
    return with_levels(DEFAULT_QUESTIONS, rubric)


def overall_only_questions(rubric: str = Rubric.PER_CRITERION) -> list[dict[str, Any]]:
    return with_levels(OVERALL_ONLY_QUESTIONS, rubric)


def level_values(question: dict[str, Any]) -> list[int]:
    return sorted(int(level["value"]) for level in question.get("levels", RUBRIC_LEVELS))


def shared_levels(questions: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The levels every question shares (a holistic rubric such as the paper's), or None when
    the questions' levels differ (each question then shows its own)."""
    first = questions[0].get("levels") if questions else None
    if first and all(question.get("levels") == first for question in questions[1:]):
        return first
    return None
