"""A campaign's rating questions, checked (`questions_clean`), and the error every campaign
service raises (`CampaignInvalid`): kept apart from `services.campaigns` so that the question
rules read on their own and the importers can check question keys without the campaign services.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, cast

from annotation.questions import Rubric, rubric_levels

QUESTION_KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,49}$")
RESERVED_QUESTION_KEYS = frozenset({"candidate_id", "reason", "id"})


class CampaignInvalid(Exception):
    """Field errors: {"field": ["message", ...]}."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{key}: {' '.join(value)}" for key, value in errors.items()))
        self.errors = errors


# --- the questions --------------------------------------------------------------------------------


class Level(TypedDict):
    value: int  # 0–100, distinct within a question
    label: str
    description: str


class Question(TypedDict):
    """A rating question as a campaign stores it: its levels are always the rubric's."""

    key: str
    label: str
    help: str
    levels: list[Level]  # best first


def questions_clean(questions: Any, *, rubric: str = Rubric.PER_CRITERION) -> list[Question]:
    """Validate rating questions. The rubric sets the levels (`annotation.questions`): the paper's
    and the per-criterion rubric give every question theirs (levels given with a question must be
    those), a custom rubric takes the levels each question gives."""
    if not isinstance(questions, list) or not questions:
        raise CampaignInvalid({"questions": ["Give a non-empty list of questions."]})
    if len(questions) > 10:
        raise CampaignInvalid({"questions": ["At most 10 questions."]})
    cleaned: list[Question] = []
    keys: set[str] = set()
    for index, question in enumerate(questions):
        where = f"questions[{index}]"
        if not isinstance(question, dict):
            raise CampaignInvalid({where: ["Expected an object with key, label and levels."]})
        key = question.get("key")
        if not isinstance(key, str) or not QUESTION_KEY_PATTERN.match(key):
            raise CampaignInvalid(
                {f"{where}.key": ["Lower-case letters, digits and _; start with a letter."]}
            )
        if key in RESERVED_QUESTION_KEYS or key in keys:
            raise CampaignInvalid({f"{where}.key": [f"The key {key!r} is taken."]})
        keys.add(key)
        label = question.get("label") or key.replace("_", " ").capitalize()
        if not isinstance(label, str) or len(label) > 100:
            raise CampaignInvalid({f"{where}.label": ["A text of at most 100 characters."]})
        help_text = question.get("help", "")
        if not isinstance(help_text, str) or len(help_text) > 1000:
            raise CampaignInvalid({f"{where}.help": ["A text of at most 1000 characters."]})
        clean_levels = _levels_clean(question.get("levels"), where=where)
        # The rubrics' levels have the stored shape (annotation.questions).
        given = (
            cast("list[Level] | None", rubric_levels(rubric, key))
            if rubric != Rubric.CUSTOM
            else None
        )
        if rubric == Rubric.CUSTOM and clean_levels is None:
            raise CampaignInvalid(
                {f"{where}.levels": ["With the custom rubric every question gives its levels."]}
            )
        if given is not None:
            if clean_levels is not None and clean_levels != given:
                raise CampaignInvalid(
                    {
                        f"{where}.levels": [
                            "These levels are not the rubric's: leave them out (the rubric "
                            "gives them) or choose the custom rubric."
                        ]
                    }
                )
            clean_levels = given
        assert clean_levels is not None
        cleaned.append({"key": key, "label": label, "help": help_text, "levels": clean_levels})
    return cleaned


def _levels_clean(levels: Any, *, where: str) -> list[Level] | None:
    """A question's levels, validated and best first; None when it gives none."""
    if not levels:
        return None
    if not isinstance(levels, list) or not 2 <= len(levels) <= 11:
        raise CampaignInvalid({f"{where}.levels": ["Give between 2 and 11 levels."]})
    clean_levels: list[Level] = []
    values: set[int] = set()
    for level in levels:
        value = level.get("value") if isinstance(level, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
            raise CampaignInvalid({f"{where}.levels": ["Each level needs an integer value."]})
        if value in values:
            raise CampaignInvalid({f"{where}.levels": [f"Level {value} appears twice."]})
        values.add(value)
        clean_levels.append(
            {
                "value": value,
                "label": str(level.get("label", ""))[:100],
                "description": str(level.get("description", ""))[:1000],
            }
        )
    clean_levels.sort(key=lambda level: -int(level["value"]))
    return clean_levels


def questions_without_levels(questions: Iterable[Mapping[str, object]]) -> list[dict[str, object]]:
    """The questions as a curator edits them under a rubric that sets the levels."""
    return [{key: value for key, value in q.items() if key != "levels"} for q in questions]
