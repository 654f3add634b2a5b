"""Rating questions. The default is the three criteria of the Rigel paper (Appendix C), each on
1–5 with the paper's rubric levels."""

from __future__ import annotations

from typing import Any

RUBRIC_LEVELS: list[dict[str, Any]] = [
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


def with_levels(questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Questions with the five rubric levels attached (a fresh copy)."""
    return [
        {**question, "levels": [dict(level) for level in RUBRIC_LEVELS]} for question in questions
    ]


def default_questions() -> list[dict[str, Any]]:
    return with_levels(DEFAULT_QUESTIONS)


def overall_only_questions() -> list[dict[str, Any]]:
    return with_levels(OVERALL_ONLY_QUESTIONS)


def level_values(question: dict[str, Any]) -> list[int]:
    return sorted(int(level["value"]) for level in question.get("levels", RUBRIC_LEVELS))
