"""Submitting an assignment: validation, idempotent replays, late submits, timing.

`assignment_submit` either stores one judgment per candidate of the assignment and marks it
submitted (201), or replays the stored result of an identical earlier submission (200), or stores
nothing at all (400 invalid, 404 not this worker's, 409 conflict or too early, 403 participation
ended).

Timing is the server's: the assignment's `issued_at` is set when `next` hands it out (a reload
gets the same lease and keeps it), and a submit earlier than the campaign's `min_seconds_on_clip`
after it is refused with 409 and `retry_after` (`SubmissionTooEarly`), nothing stored, whatever
the body's `client_timing` claims. The assignment keeps the whole server time (issued → submitted)
and, as advisory telemetry only, the client's `active_ms` / `video_played_ms`; QC's speed rules read
the server time. Each judgment keeps its share of the server and active time (the assignment's
value divided by its number of candidates), and the whole `video_played_ms` (the clip was watched
once for all of them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation.crowd.debouncing import after_submission_schedule
from annotation.crowd.services import crowd_sql as sql
from annotation.crowd.services import repeats
from annotation.crowd.services.allocation import campaign_allocation_redecide, campaign_is_adaptive
from annotation.crowd.services.assignment import assignment_slots_retake
from annotation.crowd.services.offers import iso_utc
from annotation.crowd.services.ratings import Rating, SubmitResult
from annotation.models import (
    Assignment,
    AssignmentStatus,
    Campaign,
    Judgment,
    JudgmentSource,
    Participation,
    ParticipationStatus,
    Repeat,
)
from annotation.questions import level_values
from datasets_app.models import Clip, ClipModality

MAX_CLIENT_MS = 7 * 24 * 3600 * 1000
TIMING_KEYS = ("active_ms", "video_played_ms")


# The largest id a bigint primary key can hold.
BIGINT_MAX = 2**63 - 1


class AssignmentNotFound(Exception):
    """Unknown assignment, or another worker's."""


class SubmissionInvalid(Exception):
    """Field errors, keyed by the path of the offending field (e.g. `ratings[1].relevance`)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("invalid submission")
        self.errors = errors


class SubmissionRefused(Exception):
    """A well-formed submission that cannot be accepted (`status`: 409 or 403)."""

    def __init__(self, message: str, *, status: int = 409) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class SubmissionTooEarly(SubmissionRefused):
    """Submitted before the campaign's minimum time on the clip (server clock) had passed."""

    def __init__(self, *, minimum: int, elapsed: float) -> None:
        self.retry_after = max(1, math.ceil(minimum - elapsed))
        super().__init__(
            f"Too early: this clip was given to you {elapsed:.1f} seconds ago, and this study "
            f"asks for at least {minimum} seconds on each clip. Please watch the clip and check "
            f"your ratings, then submit again in {self.retry_after} seconds.",
            status=409,
        )


@dataclass(frozen=True)
class SubmitOutcome:
    result: SubmitResult
    created: bool


@dataclass(frozen=True)
class CleanSubmission:
    ratings: list[Rating]
    active_ms: int | None
    video_played_ms: int | None

    @property
    def digest(self) -> str:
        canonical = json.dumps(
            sorted(self.ratings, key=lambda rating: rating["candidate_id"]),
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Errors(dict[str, list[str]]):
    """Every field error of a submission, by path, in the order found."""

    def fail(self, path: str, message: str) -> None:
        self.setdefault(path, []).append(message)


@dataclass(frozen=True)
class _RatingRules:
    """What one rating is checked against: the assignment's candidates and the campaign's
    questions, reason threshold and reason length."""

    expected: set[int]
    allowed_values: dict[str, Any]
    threshold: int | None
    max_reason: int


def submission_clean(*, campaign: Campaign, candidate_ids: list[int], body: Any) -> CleanSubmission:
    """Check a submit body against the assignment's candidates and the campaign's questions;
    raise SubmissionInvalid with every field error found."""
    errors = _Errors()
    if not isinstance(body, dict):
        raise SubmissionInvalid({"non_field_errors": ["Expected a JSON object."]})
    for key in body:
        if key not in ("ratings", "client_timing"):
            errors.fail(str(key)[:100], "Unknown field.")
    rules = _RatingRules(
        expected=set(candidate_ids),
        allowed_values={question["key"]: level_values(question) for question in campaign.questions},
        threshold=campaign.reason_required_at_or_below,
        max_reason=settings.LEPUS_MAX_REASON_CHARS,
    )
    ratings = _ratings_clean(body.get("ratings"), rules=rules, errors=errors)
    timing_values = _timing_clean(body.get("client_timing"), errors=errors)
    if errors:
        raise SubmissionInvalid(dict(errors))
    return CleanSubmission(
        ratings=ratings,
        active_ms=timing_values["active_ms"],
        video_played_ms=timing_values["video_played_ms"],
    )


def _ratings_clean(raw_ratings: Any, *, rules: _RatingRules, errors: _Errors) -> list[Rating]:
    ratings: list[Rating] = []
    expected = rules.expected
    if raw_ratings is None:
        errors.fail("ratings", "This field is required.")
    elif not isinstance(raw_ratings, list):
        errors.fail("ratings", "Expected a list of ratings.")
    elif len(raw_ratings) > max(len(expected), 1) * 4:
        errors.fail(
            "ratings", f"Too many ratings (this assignment has {len(expected)} candidates)."
        )
    else:
        seen: set[int] = set()
        for index, item in enumerate(raw_ratings):
            path = f"ratings[{index}]"
            if not isinstance(item, dict):
                errors.fail(path, "Expected an object.")
                continue
            ratings.append(_rating_clean(item, path=path, rules=rules, seen=seen, errors=errors))
        missing = sorted(expected - seen)
        if missing:
            errors.fail(
                "ratings", f"Missing ratings for candidates: {', '.join(map(str, missing))}."
            )
    return ratings


def _rating_clean(
    item: dict[str, Any], *, path: str, rules: _RatingRules, seen: set[int], errors: _Errors
) -> Rating:
    """One rating: its candidate (each once), a level for every question, and its reason."""
    candidate_id: Any = item.get("candidate_id")  # checked below; only a clean one escapes
    if candidate_id is None:
        errors.fail(f"{path}.candidate_id", "This field is required.")
    elif not _is_int(candidate_id):
        errors.fail(f"{path}.candidate_id", "Expected an integer.")
    elif candidate_id not in rules.expected:
        errors.fail(f"{path}.candidate_id", "Not a candidate of this assignment.")
    elif candidate_id in seen:
        errors.fail(f"{path}.candidate_id", "Duplicate rating for this candidate.")
    else:
        seen.add(candidate_id)
    values: dict[str, int] = {}
    for key, allowed in rules.allowed_values.items():
        value = item.get(key)
        if value is None:
            errors.fail(f"{path}.{key}", "This field is required.")
        elif not _is_int(value) or value not in allowed:
            errors.fail(
                f"{path}.{key}", f"Must be one of {', '.join(str(level) for level in allowed)}."
            )
        else:
            values[key] = value
    for key in item:
        if key not in rules.allowed_values and key not in ("candidate_id", "reason"):
            errors.fail(f"{path}.{str(key)[:100]}", "Unknown field.")
    reason = _reason_clean(item.get("reason"), path=path, values=values, rules=rules, errors=errors)
    return {"candidate_id": candidate_id, "values": values, "reason": reason}


def _reason_clean(
    reason: Any, *, path: str, values: dict[str, int], rules: _RatingRules, errors: _Errors
) -> str:
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        errors.fail(f"{path}.reason", "Expected a string.")
        reason = ""
    reason = reason.strip()
    if len(reason) > rules.max_reason:
        errors.fail(
            f"{path}.reason", f"Ensure this field has no more than {rules.max_reason} characters."
        )
    threshold = rules.threshold
    if (
        threshold is not None
        and not reason
        and any(value <= threshold for value in values.values())
    ):
        errors.fail(
            f"{path}.reason", f"A reason is required when a rating is {threshold} or lower."
        )
    return reason


def _timing_clean(timing: Any, *, errors: _Errors) -> dict[str, int | None]:
    timing_values: dict[str, int | None] = {key: None for key in TIMING_KEYS}
    if timing is None:
        return timing_values
    if not isinstance(timing, dict):
        errors.fail("client_timing", "Expected an object.")
        return timing_values
    for key, value in timing.items():
        if key not in TIMING_KEYS:
            errors.fail(f"client_timing.{str(key)[:100]}", "Unknown field.")
        elif value is None:
            continue
        elif not _is_int(value) or not 0 <= value <= MAX_CLIENT_MS:
            errors.fail(
                f"client_timing.{key}",
                f"Expected an integer number of milliseconds between 0 and {MAX_CLIENT_MS}.",
            )
        else:
            timing_values[key] = value
    return timing_values


def _replay(*, stored_digest: str, stored_result: Any, digest: str) -> SubmitOutcome:
    if stored_digest == digest:
        return SubmitOutcome(result=sql.py_json(stored_result), created=False)
    raise SubmissionRefused(
        "This assignment was already submitted with different ratings; the first submission stands."
    )


# The hot path in SQL (see crowd_sql for why).
_ASSIGNMENT_WITH_ITEMS = (
    "SELECT a.status, a.submission_digest, a.result, a.issued_at, a.campaign_id,"
    " i.campaign_candidate_id"
    f" FROM {sql.T_ASSIGNMENT} a JOIN {sql.T_ITEM} i ON i.assignment_id = a.id"
    " WHERE a.id = %s AND a.participation_id = %s ORDER BY i.position"
)
_COUNT_SUBMISSION = (
    f"UPDATE {sql.T_PARTICIPATION} SET assignments_submitted = assignments_submitted + 1,"
    " active_ms_total = active_ms_total + %s, last_seen_at = %s WHERE id = %s AND status <> %s"
)
_MARK_SUBMITTED = (
    f"UPDATE {sql.T_ASSIGNMENT} SET status = %s, submitted_at = %s, submission_digest = %s,"
    " result = %s, server_ms = %s, client_active_ms = %s, client_video_played_ms = %s"
    " WHERE id = %s AND status = %s"
)
_JUDGMENT_COLUMNS = sql.row_columns(sql.JudgmentRow)

# The whole usual case in one statement. Each step is gated on the previous one, which also keeps
# the lock order (participation, then assignment); the judgments go in only when the lease was
# live and the worker may submit. Anything else inserts nothing and takes the slow path.
_SUBMIT_COMBINED = (
    f"WITH p AS ({_COUNT_SUBMISSION} RETURNING id),"
    f" a AS ({_MARK_SUBMITTED} AND EXISTS (SELECT 1 FROM p) RETURNING id)"
    f" INSERT INTO {sql.T_JUDGMENT} ({_JUDGMENT_COLUMNS})"
    " SELECT * FROM (VALUES {rows}) AS submitted WHERE EXISTS (SELECT 1 FROM a)"
)


_ENDED = "Your participation in this campaign has ended, so this submission was not stored."


@dataclass(frozen=True)
class _Submit:
    """One assignment's submit, checked, on its way to the database."""

    participation: Participation
    assignment_id: int
    campaign_id: int
    issued_at: datetime
    clean: CleanSubmission
    digest: str
    now: datetime

    def after_store(self) -> None:
        """In the submit's transaction: an adaptive campaign decides again how many judgments
        the rated candidates want (`services.allocation`; the clip's row lock, then its
        candidates', after the participation and assignment locks: the engine's order). A fixed
        campaign does nothing more here. Then the quality work is scheduled."""
        campaign = self.participation.campaign
        if campaign.allocation and campaign_is_adaptive(campaign):
            campaign_allocation_redecide(
                campaign=campaign,
                campaign_candidate_ids=[rating["candidate_id"] for rating in self.clean.ratings],
            )
        after_submission_schedule(campaign_id=self.campaign_id, assignment_id=self.assignment_id)


class _SlowPath(Exception):
    """Internal: the one-statement submit did not apply; roll back and take the detailed path."""


def assignment_submit(
    *, participation: Participation, assignment_id: int, body: Any, now: datetime | None = None
) -> SubmitOutcome:
    """Store the worker's ratings of one assignment (see the module docstring)."""
    if not 0 < assignment_id <= BIGINT_MAX:
        # No row has such an id; the prepared statement's bigint parameter would refuse it.
        raise AssignmentNotFound(assignment_id)
    rows = sql.fetchall(_ASSIGNMENT_WITH_ITEMS, [assignment_id, participation.pk], prepared=True)
    if not rows:
        repeat = repeats.repeat_for_submit(
            participation_id=participation.pk, repeat_id=assignment_id
        )
        if repeat is None:
            raise AssignmentNotFound(assignment_id)
        return _repeat_submit(participation=participation, repeat=repeat, body=body, now=now)
    status, stored_digest, stored_result, issued_at, campaign_id = rows[0][:5]
    candidate_ids = [row[5] for row in rows]
    clean = submission_clean(
        campaign=participation.campaign, candidate_ids=candidate_ids, body=body
    )
    digest = clean.digest
    if status == AssignmentStatus.SUBMITTED:
        return _replay(stored_digest=stored_digest, stored_result=stored_result, digest=digest)

    now = now or timezone.now()
    _refuse_too_early(
        campaign=participation.campaign,
        issued_at=issued_at,
        now=now,
        clip_id=lambda: Assignment.objects.values_list("clip_id", flat=True).get(pk=assignment_id),
    )
    submit = _Submit(
        participation=participation,
        assignment_id=assignment_id,
        campaign_id=campaign_id,
        issued_at=issued_at,
        clean=clean,
        digest=digest,
        now=now,
    )
    try:
        with contextlib.suppress(_SlowPath), transaction.atomic():
            return _store_combined(submit)
        with transaction.atomic():
            return _store(submit)
    except IntegrityError:
        # The last line of defence (one judgment per worker and candidate) fired: nothing stored.
        raise SubmissionRefused("These ratings conflict with ratings already stored.")


def _refuse_too_early(
    *, campaign: Campaign, issued_at: datetime, now: datetime, clip_id: Callable[[], int]
) -> None:
    """`min_seconds_on_clip` is a video's watch gate: a still image has nothing to watch to the
    end, so it does not apply to one (docs/crowd-flow.md). The clip is read only on the rare
    early submit, so the usual submit stays one statement."""
    minimum = campaign.min_seconds_on_clip or 0
    elapsed = (now - issued_at).total_seconds()
    if (
        elapsed < minimum
        and not Clip.objects.filter(pk=clip_id(), modality=ClipModality.IMAGE).exists()
    ):
        raise SubmissionTooEarly(minimum=minimum, elapsed=max(0.0, elapsed))


def _result(*, assignment_id: int, count: int, now: datetime) -> SubmitResult:
    return {
        "assignment_id": assignment_id,
        "status": AssignmentStatus.SUBMITTED.value,
        "judgments": count,
        "submitted_at": iso_utc(now),
    }


def _repeat_submit(
    *, participation: Participation, repeat: Repeat, body: Any, now: datetime | None
) -> SubmitOutcome:
    """A test-retest repeat (see `services.repeats`): the same checks and the same answers as an
    assignment, so nothing tells the worker it was a repeat; the ratings go to RepeatJudgment and
    no counter that quotas, payments or limits read moves."""
    clean = submission_clean(
        campaign=participation.campaign, candidate_ids=list(repeat.candidate_ids), body=body
    )
    digest = clean.digest
    if repeat.status == AssignmentStatus.SUBMITTED:
        return _replay(
            stored_digest=repeat.submission_digest, stored_result=repeat.result, digest=digest
        )
    now = now or timezone.now()
    _refuse_too_early(
        campaign=participation.campaign,
        issued_at=repeat.issued_at,
        now=now,
        clip_id=lambda: repeat.clip_id,
    )
    result = _result(assignment_id=repeat.pk, count=len(clean.ratings), now=now)
    with transaction.atomic():
        if not repeats.repeat_touch_participation(
            participation_id=participation.pk, now=now, excluded=ParticipationStatus.EXCLUDED.value
        ):
            raise SubmissionRefused(_ENDED, status=403)
        if repeats.repeat_store(
            repeat=repeat, ratings=clean.ratings, digest=digest, result=result, now=now
        ):
            return SubmitOutcome(result=result, created=True)
    stored = Repeat.objects.get(pk=repeat.pk)
    return _replay(
        stored_digest=stored.submission_digest, stored_result=stored.result, digest=digest
    )


def _store(submit: _Submit) -> SubmitOutcome:
    # Lock order: participation, then assignment (see services.assignment). The counter update is
    # the participation lock; it is rolled back with everything else if the submit is refused.
    locked = sql.execute(
        _COUNT_SUBMISSION,
        [
            submit.clean.active_ms or 0,
            submit.now,
            submit.participation.pk,
            ParticipationStatus.EXCLUDED.value,
        ],
    )
    if not locked:
        raise SubmissionRefused(_ENDED, status=403)
    result, mark, judgment_rows = _rows(submit)
    # The slow path (the one-statement attempt did not apply): usually the lease has expired or a
    # concurrent submit got there first, but its state may have moved since that attempt, so the
    # live case is tried first. The row lock the UPDATE takes serialises concurrent submits.
    if not sql.execute(_MARK_SUBMITTED, [*mark, AssignmentStatus.LIVE.value]):
        assignment = Assignment.objects.select_for_update().get(pk=submit.assignment_id)
        if assignment.status == AssignmentStatus.SUBMITTED:
            # A concurrent request got here first.
            transaction.set_rollback(True)
            return _replay(
                stored_digest=assignment.submission_digest,
                stored_result=assignment.result,
                digest=submit.digest,
            )
        # Expired: accepted only if every slot can be taken again.
        if not assignment_slots_retake(assignment=assignment):
            raise SubmissionRefused(
                "This assignment expired and its clip has since been given to other workers, so "
                "these ratings could not be stored. Please continue with the next clip."
            )
        sql.execute(_MARK_SUBMITTED, [*mark, AssignmentStatus.EXPIRED.value])

    rows = ", ".join([sql.row_placeholders(sql.JudgmentRow)] * len(judgment_rows))
    sql.execute(
        f"INSERT INTO {sql.T_JUDGMENT} ({_JUDGMENT_COLUMNS}) VALUES {rows}",
        [value for row in judgment_rows for value in row],
    )
    submit.after_store()
    return SubmitOutcome(result=result, created=True)


def _store_combined(submit: _Submit) -> SubmitOutcome:
    result, mark, judgment_rows = _rows(submit)
    inserted = sql.execute(
        _SUBMIT_COMBINED.format(
            rows=", ".join([sql.row_casts(sql.JudgmentRow)] * len(judgment_rows))
        ),
        [
            submit.clean.active_ms or 0,
            submit.now,
            submit.participation.pk,
            ParticipationStatus.EXCLUDED.value,
            *mark,
            AssignmentStatus.LIVE.value,
            *[value for row in judgment_rows for value in row],
        ],
        prepared=True,
    )
    if inserted != len(judgment_rows):
        raise _SlowPath()
    submit.after_store()
    return SubmitOutcome(result=result, created=True)


def _rows(submit: _Submit) -> tuple[SubmitResult, list[Any], list[list[Any]]]:
    """The result body, the parameters that mark the assignment submitted (without the status it
    must have), and one row of column values per judgment."""
    count = len(submit.clean.ratings)
    server_ms = max(0, int((submit.now - submit.issued_at).total_seconds() * 1000))
    result = _result(assignment_id=submit.assignment_id, count=count, now=submit.now)
    mark = [
        AssignmentStatus.SUBMITTED.value,
        submit.now,
        submit.digest,
        sql.db_json(Assignment, "result", result),
        server_ms,
        submit.clean.active_ms,
        submit.clean.video_played_ms,
        submit.assignment_id,
    ]
    created_at = submit.now
    empty_detail = sql.db_json(Judgment, "exclusion_detail", {})
    judgment_rows = [
        sql.row_values(
            sql.JudgmentRow(
                campaign_id=submit.campaign_id,
                campaign_candidate_id=rating["candidate_id"],
                participation_id=submit.participation.pk,
                assignment_id=submit.assignment_id,
                values=sql.db_json(Judgment, "values", rating["values"]),
                reason=rating["reason"],
                source=JudgmentSource.CROWD.value,
                server_ms=server_ms // count,
                client_active_ms=None
                if submit.clean.active_ms is None
                else submit.clean.active_ms // count,
                client_video_played_ms=submit.clean.video_played_ms,
                created_at=created_at,
                is_excluded=False,
                excluded_by="",
                exclusion_reason="",
                exclusion_detail=empty_detail,
            )
        )
        for rating in submit.clean.ratings
    ]
    return result, mark, judgment_rows
