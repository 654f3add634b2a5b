"""The prompt's rubric is the annotation rubric: the teacher reads the levels the crowd rated with.

Kept beside the Django-side tests: it imports the annotation app, which the Django-free Rigel tests
(tests/rigel/) do not.
"""

from __future__ import annotations

from annotation.questions import RUBRIC_LEVELS as ANNOTATION_RUBRIC
from training_bridge.rigel import prompts


def test_rubric_matches_the_annotation_rubric() -> None:
    assert [(lvl["value"], lvl["label"], lvl["description"]) for lvl in ANNOTATION_RUBRIC] == [
        tuple(level) for level in prompts.RUBRIC_LEVELS
    ]
