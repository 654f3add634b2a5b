"""The rows a worker's submit turns into: one `Rating` per candidate (checked by
`services.submission.submission_clean`, stored as a `Judgment` or, for a test-retest repeat, a
`RepeatJudgment`) and the `SubmitResult` the worker API answers and the assignment keeps."""

from __future__ import annotations

from typing import TypedDict


class Rating(TypedDict):
    candidate_id: int  # a campaign candidate of the assignment (else the submission is refused)
    values: dict[str, int]  # question key -> level value
    reason: str


class SubmitResult(TypedDict):
    assignment_id: int
    status: str
    judgments: int
    submitted_at: str
