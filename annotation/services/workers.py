"""Crowd entry: joining a campaign from a crowd platform or an invite link, worker tokens, invites.

Workers are not Django users. A worker is identified by (platform, external id) — the same external
id always maps to the same `Worker` row — and, inside one campaign, by a `Participation` whose worker
token travels as `Authorization: Worker <token>`. Only the token's sha256 is stored.

The token is derived from the participation with an HMAC of the server secret, so joining again
(a second tab, a reload on another device) returns the very same, still working token instead of
invalidating the first one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation.models import (
    Campaign,
    CampaignStatus,
    Participation,
    Platform,
    Worker,
)
from annotation.services import crowd_sql

JOINABLE_PLATFORMS = (Platform.PROLIFIC, Platform.MTURK, Platform.INVITE)
EXTERNAL_ID_MAX_CHARS = 200
PLATFORM_ID_MAX_CHARS = 200
INVITE_SALT = "lepus.invite"
_TOKEN_CONTEXT = "lepus.worker-token"


class JoinRefused(Exception):
    """The campaign cannot be joined (closed, imported, bad invite). `status` is the HTTP answer."""

    def __init__(self, message: str, *, status: int = 409, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field


@dataclass(frozen=True)
class JoinResult:
    participation: Participation
    worker_token: str
    created: bool


@dataclass(frozen=True)
class Invite:
    campaign_slug: str
    invitee: str
    expires_at: datetime


# --- tokens -----------------------------------------------------------------------------------


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def worker_token_for(*, participation: Participation) -> str:
    """The participation's worker token (stable for a given server secret)."""
    message = f"{_TOKEN_CONTEXT}:{participation.pk}:{participation.worker_id}".encode()
    digest = hmac.new(settings.SECRET_KEY.encode("utf-8"), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


_CAMPAIGN_COLUMNS = (
    "slug",
    "name",
    "status",
    "is_imported",
    "questions",
    "reference_free",
    "lease_seconds",
    "min_seconds_on_clip",
    "reason_required_at_or_below",
    "max_assignments_per_worker",
    "completion_code",
    "redirect_url",
)
_PARTICIPATION_COLUMNS = ("id", "campaign_id", "worker_id", "status", "assignments_submitted")
_AUTH_SQL = (
    "SELECT "
    + ", ".join(f"p.{column}" for column in _PARTICIPATION_COLUMNS)
    + ", "
    + ", ".join(f"c.{column}" for column in _CAMPAIGN_COLUMNS)
    + f" FROM {crowd_sql.T_PARTICIPATION} p JOIN {crowd_sql.T_CAMPAIGN} c ON c.id = p.campaign_id"
    " WHERE p.token_hash = %s"
)


def participation_by_token(*, token: str) -> Participation | None:
    """The participation holding `token`, with the campaign settings the worker API needs loaded
    in the same query (one indexed lookup per request; other fields load lazily if touched)."""
    if not token or len(token) > 200:
        return None
    row = crowd_sql.fetchone(_AUTH_SQL, [token_hash(token)])
    if row is None:
        return None
    participation_values = dict(zip(_PARTICIPATION_COLUMNS, row, strict=False))
    campaign_values = dict(zip(_CAMPAIGN_COLUMNS, row[len(_PARTICIPATION_COLUMNS) :], strict=True))
    campaign_values["id"] = participation_values["campaign_id"]
    campaign_values["questions"] = crowd_sql.py_json(campaign_values["questions"])
    campaign_values["is_imported"] = bool(campaign_values["is_imported"])
    campaign_values["reference_free"] = bool(campaign_values["reference_free"])
    participation: Participation = crowd_sql.instance(Participation, participation_values)
    participation.campaign = crowd_sql.instance(Campaign, campaign_values)
    return participation


# --- invites ----------------------------------------------------------------------------------


def invite_token_make(*, campaign: Campaign, invitee: str, expires_at: datetime) -> str:
    """An HMAC-signed invite binding campaign, invitee id and expiry (LEPUS_INVITE_SECRET)."""
    invitee = invitee.strip()
    if not invitee or len(invitee) > EXTERNAL_ID_MAX_CHARS:
        raise ValueError(f"invitee id must be 1 to {EXTERNAL_ID_MAX_CHARS} characters")
    payload = {"c": campaign.slug, "i": invitee, "e": int(expires_at.timestamp())}
    return signing.dumps(payload, key=settings.LEPUS_INVITE_SECRET, salt=INVITE_SALT)


def invite_token_read(*, token: str, campaign: Campaign, now: datetime | None = None) -> Invite:
    """Check an invite's signature, campaign and expiry; raise JoinRefused (403) otherwise."""
    try:
        payload: Any = signing.loads(token, key=settings.LEPUS_INVITE_SECRET, salt=INVITE_SALT)
    except signing.BadSignature:
        raise JoinRefused("This invite link is not valid.", status=403, field="invite_token")
    if not isinstance(payload, dict) or not {"c", "i", "e"} <= payload.keys():
        raise JoinRefused("This invite link is not valid.", status=403, field="invite_token")
    if payload["c"] != campaign.slug:
        raise JoinRefused(
            "This invite link belongs to another campaign.", status=403, field="invite_token"
        )
    expires_at = datetime.fromtimestamp(int(payload["e"]), tz=UTC)
    if expires_at <= (now or timezone.now()):
        raise JoinRefused("This invite link has expired.", status=403, field="invite_token")
    return Invite(campaign_slug=payload["c"], invitee=str(payload["i"]), expires_at=expires_at)


def invite_url_path(*, campaign: Campaign, token: str) -> str:
    from urllib.parse import urlencode

    return f"/w/{campaign.slug}/?{urlencode({'invite': token})}"


def invite_create(
    *, campaign: Campaign, invitee: str, valid_for: timedelta = timedelta(days=14)
) -> tuple[str, datetime]:
    expires_at = timezone.now() + valid_for
    return invite_token_make(campaign=campaign, invitee=invitee, expires_at=expires_at), expires_at


# --- joining ----------------------------------------------------------------------------------


def _platform_data(platform: str, identifiers: dict[str, str]) -> dict[str, str]:
    keys = {
        Platform.PROLIFIC: ("study_id", "session_id"),
        Platform.MTURK: ("assignment_id", "hit_id", "turk_submit_to"),
        Platform.INVITE: (),
    }[Platform(platform)]
    return {key: identifiers[key] for key in keys if identifiers.get(key)}


def worker_join(
    *,
    campaign: Campaign,
    platform: str,
    external_id: str = "",
    invite_token: str = "",
    identifiers: dict[str, str] | None = None,
) -> JoinResult:
    """Join `campaign` as the worker (platform, external id); idempotent.

    Joining implies consent: clients show the consent text before they call this. Invite joins take
    the invitee id from the signed invite (an `external_id`, if given, must match it).
    """
    if campaign.is_imported:
        raise JoinRefused("No such campaign.", status=404)
    if campaign.status != CampaignStatus.ACTIVE:
        raise JoinRefused("This campaign is not open for new workers.", status=409)
    if platform not in JOINABLE_PLATFORMS:
        raise JoinRefused(f"Unknown platform {platform!r}.", status=400, field="platform")
    external_id = (external_id or "").strip()
    if platform == Platform.INVITE:
        invite = invite_token_read(token=invite_token, campaign=campaign)
        if external_id and external_id != invite.invitee:
            raise JoinRefused(
                "external_id does not match the invite.", status=400, field="external_id"
            )
        external_id = invite.invitee
    if not external_id:
        raise JoinRefused("This field is required.", status=400, field="external_id")

    worker = _worker_get_or_create(platform=platform, external_id=external_id)
    now = timezone.now()
    platform_data = _platform_data(platform, identifiers or {})
    participation, created = _participation_get_or_create(
        campaign=campaign, worker=worker, platform_data=platform_data, now=now
    )
    token = worker_token_for(participation=participation)
    wanted_hash = token_hash(token)
    changes: dict[str, Any] = {}
    if participation.token_hash != wanted_hash:
        changes["token_hash"] = wanted_hash
    if participation.consented_at is None:
        changes["consented_at"] = now
    if platform_data and not created:
        # Keep every session the worker came through (Prolific returns / MTurk re-accepts).
        merged = {**participation.platform_data, **platform_data}
        if merged != participation.platform_data:
            changes["platform_data"] = merged
    if changes:
        Participation.objects.filter(pk=participation.pk).update(**changes)
        for name, value in changes.items():
            setattr(participation, name, value)
    participation.campaign = campaign
    participation.worker = worker
    return JoinResult(participation=participation, worker_token=token, created=created)


def _worker_get_or_create(*, platform: str, external_id: str) -> Worker:
    worker = Worker.objects.filter(platform=platform, external_id=external_id).first()
    if worker is not None:
        return worker
    try:
        with transaction.atomic():
            return Worker.objects.create(platform=platform, external_id=external_id)
    except IntegrityError:  # a concurrent join of the same person won the race
        return Worker.objects.get(platform=platform, external_id=external_id)


def _participation_get_or_create(
    *, campaign: Campaign, worker: Worker, platform_data: dict[str, str], now: datetime
) -> tuple[Participation, bool]:
    participation = Participation.objects.filter(campaign=campaign, worker=worker).first()
    if participation is not None:
        return participation, False
    try:
        with transaction.atomic():
            participation = Participation.objects.create(
                campaign=campaign,
                worker=worker,
                platform_data=platform_data,
                consented_at=now,
                joined_at=now,
            )
            # The token needs the primary key; set its hash in the same transaction.
            participation.token_hash = token_hash(worker_token_for(participation=participation))
            Participation.objects.filter(pk=participation.pk).update(
                token_hash=participation.token_hash
            )
            return participation, True
    except IntegrityError:
        return Participation.objects.get(campaign=campaign, worker=worker), False
