"""Preview as a worker: a curator goes through a campaign's rating page exactly as a worker sees
it, and nothing is stored.

The page (`annotation.crowd.views.preview`) is the worker's template and script; only the four URLs it
talks to differ. They answer like the worker API (join, next, submit, me; same bodies, same
validation of a submission) but never create a worker, participation, assignment or judgment and
never touch a slot counter: `next` reads the campaign's servable clips in order and builds an
`Offer` that no assignment stands behind; `submit` runs the real `submission_clean` and answers
without a write. The only state is how many clips this preview has passed, kept in the cache (not
the database) for an hour under a random id carried by the token.

The token is a signed, time-limited capability (Django's signing, salted): the page is opened by a
logged-in curator, but the script sends no cookie (`credentials: "omit"`, so the page also works
inside MTurk's iframe), so the token says which curator opened which campaign. A curator who has
lost the role since gets 401 like an unknown worker token.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict

from django.contrib.auth import get_user_model
from django.core import signing
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from annotation.crowd.services.offers import (
    MEDIA_COLUMNS,
    Offer,
    OfferPayload,
    assignment_offer_payload,
    clip_references,
)
from annotation.crowd.services.progress import Progress
from annotation.crowd.services.submission import submission_clean
from annotation.models import Campaign, CampaignCandidate, CampaignClip
from common.permissions import is_curator
from datasets_app.models import ClipStatus

SALT = "lepus.annotation.preview"
TOKEN_MAX_AGE = 4 * 3600
PROGRESS_SECONDS = 3600
# A preview shows the first clips a worker could get; a whole campaign is not the point.
PREVIEW_CLIPS = 5


class PreviewSubmitted(TypedDict):
    """What the preview's `submit` answers: the ratings were checked, and nothing was stored."""

    assignment_id: int
    judgments: int
    stored: bool
    detail: str


class PreviewRefused(Exception):
    """The token is missing, forged, expired, or its curator is no longer a curator."""


@dataclass(frozen=True)
class PreviewSession:
    campaign: Campaign
    nonce: str

    @property
    def cache_key(self) -> str:
        return f"lepus:preview:{self.campaign.pk}:{self.nonce}"


def preview_token_issue(*, campaign: Campaign, user: Any) -> str:
    payload = {"campaign": campaign.pk, "user": user.pk, "nonce": secrets.token_urlsafe(12)}
    return signing.dumps(payload, salt=SALT, compress=True)


def preview_session(*, token: str) -> PreviewSession:
    try:
        payload = signing.loads(token, salt=SALT, max_age=TOKEN_MAX_AGE)
    except signing.BadSignature as error:  # SignatureExpired is a BadSignature
        raise PreviewRefused("Unknown or expired preview token.") from error
    user = get_user_model().objects.filter(pk=payload["user"], is_active=True).first()
    if user is None or not is_curator(user):
        raise PreviewRefused("The curator who opened this preview is no longer a curator.")
    campaign = Campaign.objects.filter(pk=payload["campaign"]).first()
    if campaign is None:
        raise PreviewRefused("The campaign of this preview is gone.")
    return PreviewSession(campaign=campaign, nonce=str(payload["nonce"]))


def _clips(campaign: Campaign) -> list[int]:
    """The first servable clips of the campaign, in the order the campaign was built."""
    return list(
        CampaignClip.objects.filter(campaign=campaign, clip__status=ClipStatus.READY)
        .filter(Q(clip__video_key__gt="") | Q(clip__image_key__gt=""))
        .order_by("pk")
        .values_list("clip_id", flat=True)[:PREVIEW_CLIPS]
    )


def _passed(session: PreviewSession) -> int:
    return int(cache.get(session.cache_key, 0))


def _offer(session: PreviewSession, number: int) -> OfferPayload | None:
    """The offer of the `number`-th clip (1-based), or None past the preview's last clip."""
    clips = _clips(session.campaign)
    if not 1 <= number <= len(clips):
        return None
    items = list(
        CampaignCandidate.objects.filter(campaign=session.campaign, clip_id=clips[number - 1])
        .select_related("candidate", "clip")
        .order_by("pk")
    )
    if not items:
        return None
    campaign = session.campaign
    clip = items[0].clip
    now = timezone.now()
    offer = Offer.of_clip(
        [getattr(clip, column) for column in MEDIA_COLUMNS],
        lease=(number, now, now + timedelta(seconds=campaign.lease_seconds)),
        clip_id=clip.pk,
        candidates=((item.pk, item.candidate.text) for item in items),
        references=clip_references(campaign=campaign, clip_id=clip.pk),
    )
    return assignment_offer_payload(offer=offer, campaign=campaign)


def preview_next(*, session: PreviewSession) -> OfferPayload | None:
    """The next clip of the preview as the worker API's `next` body, or None when done."""
    return _offer(session, _passed(session) + 1)


def preview_submit(*, session: PreviewSession, number: int, body: Any) -> PreviewSubmitted | None:
    """Check a submission as the worker API does (raises SubmissionInvalid) and store nothing;
    None when `number` is not the preview's current clip."""
    if number != _passed(session) + 1:
        return None
    offer = _offer(session, number)
    if offer is None:
        return None
    clean = submission_clean(
        campaign=session.campaign,
        candidate_ids=[candidate["id"] for candidate in offer["candidates"]],
        body=body,
    )
    cache.set(session.cache_key, number, PROGRESS_SECONDS)
    return {
        "assignment_id": number,
        "judgments": len(clean.ratings),
        "stored": False,
        "detail": "Preview: the ratings were checked and not stored.",
    }


def preview_progress(*, session: PreviewSession) -> Progress:
    """The worker API's `me` body for the preview. Never a redirect URL: a curator who finishes
    a preview stays on the end screen instead of being sent to the crowd platform."""
    campaign = session.campaign
    done = _passed(session)
    remaining = max(0, len(_clips(campaign)) - done)
    state = "working" if remaining else ("finished" if done else "no_work")
    return {
        "campaign": campaign.slug,
        "state": state,
        "assignments_done": done,
        "remaining_estimate": remaining,
        "live_assignment_id": None,
        "max_assignments": campaign.max_assignments_per_worker,
        "completion_code": (campaign.completion_code or None) if state == "finished" else None,
        "redirect_url": None,
    }
