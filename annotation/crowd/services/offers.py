"""What `next` hands a worker: one clip, its candidates in the order to show, the clip's
references. The engine (`services.assignment`), test-retest repeats (`services.repeats`) and the
curator's preview (`services.preview`) each build an `Offer`; `assignment_offer_payload` renders
it without another query.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from annotation.crowd.services import crowd_sql as sql
from annotation.models import Campaign
from annotation.questions import RUBRIC_LEVELS
from common import storage
from datasets_app.models import ClipModality


@dataclass(frozen=True, slots=True)
class Offer:
    """One clip handed to a worker. `assignment_id` is what the worker submits to: an
    `Assignment`'s id, a `Repeat`'s (the same id space, so a repeat looks like any lease), or the
    preview's clip number. `references` is empty for a reference-free campaign."""

    assignment_id: int
    clip_id: int
    video_key: str
    poster_key: str
    duration: float | None
    issued_at: datetime
    expires_at: datetime
    candidates: tuple[tuple[int, str], ...]  # (campaign candidate id, text), in the order to show
    references: tuple[str, ...]
    # "video", or "image" for a still image (shown from `image_key`; `video_key` is empty).
    modality: str = "video"
    image_key: str = ""

    @classmethod
    def of_clip(
        cls,
        media: Sequence[Any],
        *,
        lease: tuple[int, datetime, datetime],
        clip_id: int,
        candidates: Iterable[tuple[int, str]],
        references: tuple[str, ...],
    ) -> Offer:
        """An offer of the clip whose `media` (`MEDIA_COLUMNS`, as the engine's queries select
        them) it shows, under `lease` (assignment id, issued at, expires at)."""
        video_key, poster_key, duration, modality, image_key = media
        assignment_id, issued_at, expires_at = lease
        return cls(
            assignment_id,
            clip_id,
            video_key,
            poster_key,
            duration,
            issued_at,
            expires_at,
            tuple(candidates),
            references,
            modality,
            image_key,
        )


# A clip's media in the order `Offer.of_clip` takes them.
MEDIA_COLUMNS = ("video_key", "poster_key", "duration", "modality", "image_key")


_REFERENCES = (
    f"SELECT text FROM {sql.T_REFERENCE} WHERE clip_id = %s AND language = 'en' ORDER BY position"
)


def clip_references(*, campaign: Campaign, clip_id: int) -> tuple[str, ...]:
    """The clip's English references in their order, as `campaign` shows them: none when it is
    reference-free."""
    if campaign.reference_free:
        return ()
    return tuple(text for (text,) in sql.fetchall(_REFERENCES, [clip_id]))


# --- what the worker sees ----------------------------------------------------------------------


class LevelPayload(TypedDict):
    value: int
    label: str
    description: str


class QuestionPayload(TypedDict):
    key: str
    label: str
    levels: list[LevelPayload]


class ClipPayload(TypedDict):
    id: int
    modality: str
    video_url: str | None
    image_url: str | None
    poster_url: str | None
    duration: float | None


class CandidatePayload(TypedDict):
    id: int
    text: str


class _OfferHead(TypedDict):
    assignment_id: int
    expires_at: str
    clip: ClipPayload
    references: NotRequired[list[str]]  # absent for a reference-free campaign


class OfferPayload(_OfferHead):
    candidates: list[CandidatePayload]
    questions: list[QuestionPayload]


def iso_utc(value: datetime) -> str:
    """A time as the worker API writes it: ISO 8601 in UTC with a Z."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def levels_payload(question: Mapping[str, Any]) -> list[LevelPayload]:
    """A question's levels as the worker sees them, in ascending value (the rubric's when the
    question gives none)."""
    levels = sorted(question.get("levels") or RUBRIC_LEVELS, key=lambda level: level["value"])
    return [
        {
            "value": int(level["value"]),
            "label": level.get("label", ""),
            "description": level.get("description", ""),
        }
        for level in levels
    ]


def questions_payload(*, campaign: Campaign) -> list[QuestionPayload]:
    """The campaign's questions as the worker API shows them (levels in ascending value)."""
    return [
        {
            "key": question["key"],
            "label": question.get("label") or question["key"],
            "levels": levels_payload(question),
        }
        for question in campaign.questions
    ]


def assignment_offer_payload(*, offer: Offer, campaign: Campaign) -> OfferPayload:
    """The body of `POST /api/v1/worker/assignments/next` for this offer.

    Never says which candidates are control items. Media URLs are short-lived (see
    `common.storage.media_url`). A still image (`modality` "image") has an `image_url` and no
    video, poster or duration: the page shows it and has nothing to watch to the end."""
    image = offer.modality == ClipModality.IMAGE
    clip: ClipPayload = {
        "id": offer.clip_id,
        "modality": offer.modality,
        "video_url": None if image else storage.media_url(offer.video_key),
        "image_url": storage.media_url(offer.image_key) if image else None,
        "poster_url": storage.media_url(offer.poster_key) if offer.poster_key else None,
        "duration": offer.duration,
    }
    # The keys in the order the API has always written them (references before the candidates).
    head: _OfferHead = {
        "assignment_id": offer.assignment_id,
        "expires_at": iso_utc(offer.expires_at),
        "clip": clip,
    }
    if not campaign.reference_free:
        head["references"] = list(offer.references)
    return {
        **head,
        "candidates": [
            {"id": candidate_id, "text": text} for candidate_id, text in offer.candidates
        ],
        "questions": questions_payload(campaign=campaign),
    }
