"""Crowd entry: joining a campaign from a crowd platform or an invite link, worker tokens, invites.

Workers are not Django users. A worker is identified by (platform, external id) — the same external
id always maps to the same `Worker` row — and, inside one campaign, by a `Participation` whose worker
token travels as `Authorization: Worker <token>`. Only the token's sha256 is stored.

One person, one worker: external ids are normalised before every lookup
(`external_id_normalize`: Unicode NFKC, invisible format and control characters dropped,
surrounding whitespace stripped, and case folded the way the platform's ids are case-insensitive:
Prolific ids in lower case, MTurk worker ids in upper case, invitee ids case-folded), so
`WORKER_A_0001`, `worker_a_0001`, `WORKER_A_0001` + U+200B and the full-width `ＷＯＲＫＥＲ_A_0001` are
one worker with one participation, one token and one quota. With `LEPUS_CHECK_WORKER_IDS` (on by
default) the normalised id must also have the platform's shape: Prolific's 24 hexadecimal
characters, MTurk's `A` followed by upper-case letters and digits; invitee ids come from the
signed invite. A campaign may be bound to one Prolific study or MTurk HIT
(`Campaign.prolific_study_id`, `Campaign.mturk_hit_id`): joins that do not carry it are refused.

Exclusion is per person: joining again under any variant of an excluded worker's id is refused
(403), and the excluded participation's token no longer reaches any worker view: every worker
route answers 403 with the campaign's screen-out (`screen_out_payload`, raised by the
authentication), so no token of that person reaches `next` or `submit` again. Re-inclusion by a
curator restores both.

After an erasure the participation is gone (or under a pseudonym), and a keyed hash of the person
keeps them out of that campaign (`annotation.crowd.services.barring`): an excluded person still gets the
screen-out, an erased one a refusal, so nobody rates a clip of the campaign twice.

A platform id is not a password (docs/crowd-flow.md, "Who a worker is"): anyone can type one into
a link. So the token goes only to the browser that joined first: the rating page keeps a random
browser key in the browser's localStorage and sends it with every join; the first join stores its
sha256 (`Participation.browser_key_hash`), and a later join with the same id but without that key
gets no token (409, `in_use_elsewhere`), whether the first session is live or has expired.

The token is derived from the participation with an HMAC of the server secret, so joining again
from the same browser (a second tab, a reload, coming back later) returns the very same, still
working token instead of invalidating the first one. It expires `LEPUS_WORKER_TOKEN_TTL` seconds
after the worker was last active (a join, a `next`, a `submit`); joining after that from the same
browser issues a token of the next generation, and the old one never works again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation.crowd.services import crowd_sql
from annotation.crowd.services.barring import barred_reason
from annotation.crowd.services.screen_out import (
    ScreenOut,
    campaign_screen_out_payload,
    screen_out_payload,
)
from annotation.models import (
    BarReason,
    Campaign,
    CampaignStatus,
    Participation,
    ParticipationStatus,
    Platform,
    Worker,
)

JOINABLE_PLATFORMS = (Platform.PROLIFIC, Platform.MTURK, Platform.INVITE)
EXTERNAL_ID_MAX_CHARS = 200
PLATFORM_ID_MAX_CHARS = 200
INVITE_SALT = "lepus.invite"
_TOKEN_CONTEXT = "lepus.worker-token"
# The rating page's browser key: 32 random bytes, base64url (43 characters).
BROWSER_KEY_MIN_CHARS = 16
BROWSER_KEY_MAX_CHARS = 200
IN_USE_ELSEWHERE_DETAIL = (
    "This participant id is already taking part in this study in another browser. Please "
    "continue in the browser where you started. If that was not you, write to the researchers "
    "through your crowd platform's messaging."
)
ERASED_REJOIN_DETAIL = (
    "Your data from this study was erased, so it cannot be taken again under this participant id."
)
# The shapes of the platforms' ids, after normalisation.
PROLIFIC_ID = re.compile(r"[0-9a-f]{24}")
MTURK_WORKER_ID = re.compile(r"A[0-9A-Z]{7,31}")
# Unicode categories that never belong in an id: controls, format characters (zero-width space
# and joiners, soft hyphen, BOM, bidi marks), surrogates, private use, unassigned.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


class JoinRefused(Exception):
    """The campaign cannot be joined (closed, imported, bad invite). `status` is the HTTP answer;
    `body`, when given, is the whole answer (the screen-out of an excluded worker)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 409,
        field: str | None = None,
        body: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field
        self.body = body


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


# --- identities -------------------------------------------------------------------------------


def _is_variation_selector(char: str) -> bool:
    return "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef"


def external_id_normalize(*, platform: str, external_id: str) -> str:
    """The one spelling of an external id under which it is stored and looked up (see the module
    docstring)."""
    text = unicodedata.normalize("NFKC", external_id)
    text = "".join(
        char
        for char in text
        if unicodedata.category(char) not in _INVISIBLE_CATEGORIES
        and not _is_variation_selector(char)
    ).strip()
    if platform == Platform.PROLIFIC:
        return text.lower()
    if platform == Platform.MTURK:
        return text.upper()
    return unicodedata.normalize("NFKC", text.casefold())


def external_id_problem(*, platform: str, external_id: str) -> str | None:
    """Why a normalised external id cannot be a worker of `platform` (None: it can)."""
    if not external_id:
        return "This field is required."
    if len(external_id) > EXTERNAL_ID_MAX_CHARS:
        return f"Ensure this field has no more than {EXTERNAL_ID_MAX_CHARS} characters."
    if not settings.LEPUS_CHECK_WORKER_IDS:
        return None
    if platform == Platform.PROLIFIC and not PROLIFIC_ID.fullmatch(external_id):
        return "Not a Prolific participant id (24 hexadecimal characters)."
    if platform == Platform.MTURK and not MTURK_WORKER_ID.fullmatch(external_id):
        return "Not an MTurk worker id (A followed by 7 to 31 letters and digits)."
    return None


def _campaign_binding_check(
    *, campaign: Campaign, platform: str, identifiers: dict[str, str]
) -> None:
    """Refuse a join that does not come through the study / HIT the campaign is bound to."""
    study = campaign.prolific_study_id.strip().lower()
    hit = campaign.mturk_hit_id.strip().upper()
    if platform == Platform.INVITE or not (study or hit):
        return
    wanted, field = (study, "study_id") if platform == Platform.PROLIFIC else (hit, "hit_id")
    if not wanted:
        raise JoinRefused("This campaign does not take workers from this platform.", status=403)
    given = identifiers.get(field, "")
    given = external_id_normalize(platform=platform, external_id=given)
    if not hmac.compare_digest(given.encode("utf-8"), wanted.encode("utf-8")):
        raise JoinRefused("This link belongs to another study.", status=403, field=field)


# --- tokens -----------------------------------------------------------------------------------


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def worker_token_for(*, participation: Participation) -> str:
    """The participation's worker token (stable for a given server secret and generation)."""
    message = f"{_TOKEN_CONTEXT}:{participation.pk}:{participation.worker_id}"
    if participation.token_generation:
        message += f":{participation.token_generation}"
    digest = hmac.new(
        settings.SECRET_KEY.encode("utf-8"), message.encode("utf-8"), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def worker_token_expires_at(*, participation: Participation) -> datetime:
    """When the participation's token stops working unless the worker is active before."""
    renewed = participation.token_renewed_at or participation.joined_at
    seen = participation.last_seen_at
    latest = max(renewed, seen) if seen is not None else renewed
    return latest + timedelta(seconds=settings.LEPUS_WORKER_TOKEN_TTL)


def worker_token_problem(
    *, participation: Participation, now: datetime | None = None, revoked_ok: bool = False
) -> str | None:
    """Why the participation's (otherwise valid) token may not be used now; None if it may.
    `revoked_ok`: an excluded worker's token still serves (erasing oneself, nothing else)."""
    if participation.status == ParticipationStatus.EXCLUDED and not revoked_ok:
        return "This worker token was revoked: your participation in this campaign has ended."
    if worker_token_expires_at(participation=participation) <= (now or timezone.now()):
        return "This worker token has expired. Please open the study link again to continue."
    return None


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
    "retest_share",
    "retest_min_gap",
    "completion_code",
    "redirect_url",
    "screen_out_code",
    "screen_out_redirect_url",
    # What the submit's allocation step reads (services.allocation): loaded here rather than by
    # one deferred-field query each per submit.
    "allocation",
    "judgments_per_candidate",
    "review_range_threshold",
    "overall_question_key",
)
_PARTICIPATION_COLUMNS = (
    "id",
    "campaign_id",
    "worker_id",
    "status",
    "assignments_submitted",
    "joined_at",
    "last_seen_at",
    "token_renewed_at",
)
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
    row = crowd_sql.fetchone(_AUTH_SQL, [token_hash(token)], prepared=True)
    if row is None:
        return None
    participation_values = dict(zip(_PARTICIPATION_COLUMNS, row, strict=False))
    campaign_values = dict(zip(_CAMPAIGN_COLUMNS, row[len(_PARTICIPATION_COLUMNS) :], strict=True))
    campaign_values["id"] = participation_values["campaign_id"]
    campaign_values["questions"] = crowd_sql.py_json(campaign_values["questions"])
    campaign_values["allocation"] = crowd_sql.py_json(campaign_values["allocation"])
    participation: Participation = crowd_sql.instance(Participation, participation_values)
    participation.campaign = crowd_sql.instance(Campaign, campaign_values)
    return participation


def participation_excluded(*, participation_id: int) -> bool:
    """Whether the participation is excluded now (read fresh, not from the request's copy)."""
    return Participation.objects.filter(
        pk=participation_id, status=ParticipationStatus.EXCLUDED
    ).exists()


def screen_out_for_entry(
    *, campaign: Campaign, platform: str, external_id: str
) -> ScreenOut | None:
    """The screen-out of the worker an entry link names, if that worker was excluded from the
    campaign, also after their erasure (the rating page shows it at once instead of consent and
    instructions); None otherwise. Tells nothing `join` with the same id would not."""
    normalised = external_id_normalize(platform=platform, external_id=external_id)
    barred = barred_reason(campaign=campaign, platform=platform, external_id=normalised)
    if barred == BarReason.EXCLUDED:
        return campaign_screen_out_payload(campaign=campaign, platform=platform)
    participation = (
        Participation.objects.select_related("worker")
        .filter(
            campaign=campaign,
            worker__platform=platform,
            worker__external_id=normalised,
            status=ParticipationStatus.EXCLUDED,
        )
        .first()
    )
    if participation is None:
        return None
    participation.campaign = campaign
    return screen_out_payload(participation=participation)


# --- invites ----------------------------------------------------------------------------------


def invite_token_make(*, campaign: Campaign, invitee: str, expires_at: datetime) -> str:
    """An HMAC-signed invite binding campaign, invitee id and expiry (LEPUS_INVITE_SECRET)."""
    invitee = invitee.strip()  # normalised when it is used (worker_join)
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
    browser_key: str = "",
) -> JoinResult:
    """Join `campaign` as the worker (platform, external id); idempotent from the same browser.

    Joining implies consent: clients show the consent text before they call this. Invite joins take
    the invitee id from the signed invite (an `external_id`, if given, must match it).
    `browser_key` is the rating page's random secret of this browser (see the module docstring):
    the first join binds the participation to it, and a later join that does not present it gets
    no token (JoinRefused 409, `in_use_elsewhere`).
    """
    if campaign.is_imported:
        raise JoinRefused("No such campaign.", status=404)
    if campaign.status != CampaignStatus.ACTIVE:
        raise JoinRefused("This campaign is not open for new workers.", status=409)
    if platform not in JOINABLE_PLATFORMS:
        raise JoinRefused(f"Unknown platform {platform!r}.", status=400, field="platform")
    external_id = _joining_id(
        campaign=campaign, platform=platform, external_id=external_id, invite_token=invite_token
    )
    _campaign_binding_check(campaign=campaign, platform=platform, identifiers=identifiers or {})
    _barred_check(campaign=campaign, platform=platform, external_id=external_id)
    if len(browser_key) > BROWSER_KEY_MAX_CHARS or 0 < len(browser_key) < BROWSER_KEY_MIN_CHARS:
        raise JoinRefused(
            f"A browser key has {BROWSER_KEY_MIN_CHARS} to {BROWSER_KEY_MAX_CHARS} characters.",
            status=400,
            field="browser_key",
        )
    browser_key_hash = token_hash(browser_key) if browser_key else ""

    worker = _worker_get_or_create(platform=platform, external_id=external_id)
    now = timezone.now()
    platform_data = _platform_data(platform, identifiers or {})
    participation, created = _participation_get_or_create(
        campaign=campaign,
        worker=worker,
        platform_data=platform_data,
        now=now,
        browser_key_hash=browser_key_hash,
    )
    if participation.status == ParticipationStatus.EXCLUDED:
        participation.campaign, participation.worker = campaign, worker
        screen_out = screen_out_payload(participation=participation)
        raise JoinRefused(screen_out["detail"], status=403, body=screen_out)
    if not created:
        _browser_check(participation=participation, browser_key_hash=browser_key_hash)
    token = _participation_renew(
        participation=participation, created=created, platform_data=platform_data, now=now
    )
    participation.campaign = campaign
    participation.worker = worker
    return JoinResult(participation=participation, worker_token=token, created=created)


def _joining_id(*, campaign: Campaign, platform: str, external_id: str, invite_token: str) -> str:
    """The joining worker's normalised platform id: the invitee's for an invite join (a given
    `external_id` must match it); JoinRefused (400) when it is no valid id."""
    external_id = external_id_normalize(platform=platform, external_id=external_id or "")
    if platform == Platform.INVITE:
        invite = invite_token_read(token=invite_token, campaign=campaign)
        invitee = external_id_normalize(platform=platform, external_id=invite.invitee)
        if external_id and external_id != invitee:
            raise JoinRefused(
                "external_id does not match the invite.", status=400, field="external_id"
            )
        external_id = invitee
    problem = external_id_problem(platform=platform, external_id=external_id)
    if problem is not None:
        raise JoinRefused(problem, status=400, field="external_id")
    return external_id


def _participation_renew(
    *, participation: Participation, created: bool, platform_data: dict[str, str], now: datetime
) -> str:
    """Record the join on the participation in one UPDATE (token, consent, platform sessions)
    and return the worker token."""
    changes: dict[str, Any] = {"token_renewed_at": now}
    if not created and worker_token_expires_at(participation=participation) <= now:
        # The old token has expired: issue the next generation, so it never works again.
        participation.token_generation += 1
        changes["token_generation"] = participation.token_generation
    token = worker_token_for(participation=participation)
    wanted_hash = token_hash(token)
    if participation.token_hash != wanted_hash:
        changes["token_hash"] = wanted_hash
    if participation.consented_at is None:
        changes["consented_at"] = now
    if platform_data and not created:
        # Keep every session the worker came through (Prolific returns / MTurk re-accepts).
        merged = {**participation.platform_data, **platform_data}
        if merged != participation.platform_data:
            changes["platform_data"] = merged
    Participation.objects.filter(pk=participation.pk).update(**changes)
    for name, value in changes.items():
        setattr(participation, name, value)
    return token


def _barred_check(*, campaign: Campaign, platform: str, external_id: str) -> None:
    """Refuse a person whose participation was erased (annotation.crowd.services.barring): the
    screen-out if they had been excluded, else a plain refusal. Checked before any row is
    written, so a refused join leaves nothing behind."""
    barred = barred_reason(campaign=campaign, platform=platform, external_id=external_id)
    if barred == BarReason.EXCLUDED:
        screen_out = campaign_screen_out_payload(campaign=campaign, platform=platform)
        raise JoinRefused(screen_out["detail"], status=403, body=screen_out)
    if barred is not None:
        raise JoinRefused(ERASED_REJOIN_DETAIL, status=403)


def _browser_check(*, participation: Participation, browser_key_hash: str) -> None:
    """Let only the participation's own browser have its token. A participation joined without a
    key (before keys existed, or by a client of the API that sends none) is bound by the first
    join that sends one; the conditional UPDATE makes one of two racing browsers the owner."""
    bound = participation.browser_key_hash
    if not bound and browser_key_hash:
        claimed = Participation.objects.filter(pk=participation.pk, browser_key_hash="").update(
            browser_key_hash=browser_key_hash
        )
        if claimed:
            participation.browser_key_hash = browser_key_hash
            return
        bound = (
            Participation.objects.filter(pk=participation.pk)
            .values_list("browser_key_hash", flat=True)
            .get()
        )
    if bound and not hmac.compare_digest(bound, browser_key_hash):
        raise JoinRefused(
            IN_USE_ELSEWHERE_DETAIL,
            status=409,
            body={"detail": IN_USE_ELSEWHERE_DETAIL, "state": "in_use_elsewhere"},
        )


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
    *,
    campaign: Campaign,
    worker: Worker,
    platform_data: dict[str, str],
    now: datetime,
    browser_key_hash: str,
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
                browser_key_hash=browser_key_hash,
                consented_at=now,
                joined_at=now,
                token_renewed_at=now,
            )
            # The token needs the primary key; set its hash in the same transaction.
            participation.token_hash = token_hash(worker_token_for(participation=participation))
            Participation.objects.filter(pk=participation.pk).update(
                token_hash=participation.token_hash
            )
            return participation, True
    except IntegrityError:
        return Participation.objects.get(campaign=campaign, worker=worker), False
