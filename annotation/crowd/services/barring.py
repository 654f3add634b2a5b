"""Who may not join a campaign again, remembered without their ids (docs/privacy.md).

While a participation exists, its status is the record: an excluded participation's person is
refused at every join (`worker_join`). Erasure removes the platform id that this check needs, so
erasing a participation first writes a `BarredIdentity`: HMAC-SHA256 under `LEPUS_EXCLUSION_KEY`
of "<campaign id>:<platform>:<normalised id>". A later join computes the same digest from the id
it is given and is refused:

- `excluded`: the person was excluded by quality control; the join answers the campaign's
  screen-out, as before the erasure (erasing oneself does not undo an exclusion);
- `erased`: the person's participation was erased (by themselves or a curator), in either erasure
  mode. Their ratings may still stand under a pseudonym (`pseudonymise`), and in both modes they
  rated clips of the campaign: a new participation would serve them those clips again and, under
  a pseudonym, count the same person twice.

The campaign id inside the hashed text makes the digests of one person in two campaigns unrelated,
so the rows link nobody across campaigns; without the key the rows cannot be tested against a
guessed id. They go with the campaign (cascade).
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from django.db import IntegrityError, transaction

from annotation.models import BarReason, BarredIdentity, Campaign

_KEY_CONTEXT = b"lepus-barred-identities"


def exclusion_key() -> bytes:
    """The HMAC key: `LEPUS_EXCLUSION_KEY`, else one derived from the Django secret key."""
    configured = settings.LEPUS_EXCLUSION_KEY
    if configured:
        return configured.encode("utf-8")
    return hmac.new(settings.SECRET_KEY.encode("utf-8"), _KEY_CONTEXT, hashlib.sha256).digest()


def identity_digest(*, campaign_id: int, platform: str, external_id: str) -> str:
    """The keyed hash of a person in one campaign; `external_id` is already normalised."""
    message = f"{campaign_id}:{platform}:{external_id}".encode()
    return hmac.new(exclusion_key(), message, hashlib.sha256).hexdigest()


def barred_identity_record(
    *, campaign: Campaign, platform: str, external_id: str, reason: str
) -> None:
    """Remember that the person may not join `campaign` again. An exclusion is never downgraded
    to a plain erasure (a person erased twice keeps the stronger answer)."""
    digest = identity_digest(campaign_id=campaign.pk, platform=platform, external_id=external_id)
    existing = BarredIdentity.objects.filter(campaign=campaign, digest=digest)
    if reason == BarReason.EXCLUDED:
        existing.update(reason=reason)
    try:
        with transaction.atomic():
            BarredIdentity.objects.get_or_create(
                campaign=campaign, digest=digest, defaults={"reason": reason}
            )
    except IntegrityError:  # a concurrent erasure of the same person wrote it first
        pass


def barred_reason(*, campaign: Campaign, platform: str, external_id: str) -> str | None:
    """Why the person may not join `campaign` again (a `BarReason`), or None."""
    digest = identity_digest(campaign_id=campaign.pk, platform=platform, external_id=external_id)
    return (
        BarredIdentity.objects.filter(campaign=campaign, digest=digest)
        .values_list("reason", flat=True)
        .first()
    )
