"""What `next` hands a worker: one clip, its candidates in the order to show, the clip's
references. The engine (`services.assignment`), test-retest repeats (`services.repeats`) and the
curator's preview (`services.preview`) each build an `Offer`; `assignment_offer_payload` renders
it without another query.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from annotation.crowd.services import crowd_sql as sql
from annotation.models import Campaign


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


_REFERENCES = (
    f"SELECT text FROM {sql.T_REFERENCE} WHERE clip_id = %s AND language = 'en' ORDER BY position"
)


def clip_references(*, campaign: Campaign, clip_id: int) -> tuple[str, ...]:
    """The clip's English references in their order, as `campaign` shows them: none when it is
    reference-free."""
    if campaign.reference_free:
        return ()
    return tuple(text for (text,) in sql.fetchall(_REFERENCES, [clip_id]))
