"""Crowd identity (issue 25, points 1 and 2), in process, playing the attacker who knows a victim's
platform id: a join from another browser gets no token, so the attacker can neither read, nor
submit, nor erase in the victim's session; a worker's own erasure reaches only its participation;
an exclusion outlives erasure in both erasure modes and nobody erased rates a campaign's clips
again. tests/hardening/test_crowd_identity.py replays the findings against a real gunicorn
server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.crowd.services.barring import barred_identity_record, identity_digest
from annotation.crowd.services.workers import (
    ERASED_REJOIN_DETAIL,
    IN_USE_ELSEWHERE_DETAIL,
    token_hash,
)
from annotation.models import (
    Assignment,
    BarReason,
    BarredIdentity,
    ErasureMode,
    Judgment,
    Participation,
    Platform,
    Worker,
)
from annotation.privacy.services import participant_erase
from annotation.quality.exclusions import worker_exclude
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign

pytestmark = pytest.mark.django_db

NEXT = "/api/v1/worker/assignments/next"
ME = "/api/v1/worker/me"
ERASE = "/api/v1/worker/erase"
VICTIM = "5f1e2d3c4b5a697887766554"
SPELLINGS = [VICTIM, VICTIM.upper(), f" {VICTIM}\u200b"]
VICTIM_BROWSER = "victim-browser-key-0000000000000000000000000"
ATTACKER_BROWSER = "attacker-browser-key-00000000000000000000000"
IN_USE_ELSEWHERE = {"detail": IN_USE_ELSEWHERE_DETAIL, "state": "in_use_elsewhere"}
SCREEN_OUT = {
    "detail": "Based on your answers so far, this study has no further clips for you. "
    "Thank you for your time.",
    "state": "screened_out",
    "platform": "prolific",
    "screen_out_code": None,
    "redirect_url": None,
    "instruction": "Please return to Prolific and return your submission there.",
}


def join(slug: str, **body: str) -> tuple[int, dict]:
    response = APIClient().post(f"/api/v1/campaigns/{slug}/join", body, format="json")
    return response.status_code, response.json()


def victim_joins(slug: str, **identifiers: str) -> str:
    status, body = join(
        slug, platform="prolific", external_id=VICTIM, browser_key=VICTIM_BROWSER, **identifiers
    )
    assert status == 200, body
    return body["worker_token"]


def worker_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Worker {token}")
    return client


def rate_one_clip(client: APIClient) -> dict:
    offer = client.post(NEXT).json()
    stored = client.post(
        f"/api/v1/worker/assignments/{offer['assignment_id']}/submit",
        {"ratings": all_candidate_ratings(offer, value=2, reason="blurry")},
        format="json",
    )
    assert stored.status_code == 201, stored.content
    return offer


# --- a platform id is not a password ------------------------------------------------------------


def test_a_join_with_the_victims_id_from_another_browser_gets_no_token():
    campaign = crowd_campaign(slug="victim", clips=3, candidates_per_clip=2)
    token = victim_joins(campaign.slug, study_id="study-1", session_id="victim-session")
    victim = worker_client(token)
    held = victim.post(NEXT).json()
    before = Participation.objects.values().get()

    attempts = [
        join(campaign.slug, platform="prolific", external_id=spelling, **browser)
        for spelling in SPELLINGS
        for browser in ({}, {"browser_key": ATTACKER_BROWSER}, {"browser_key": ""})
    ]
    with_session = join(
        campaign.slug,
        platform="prolific",
        external_id=VICTIM,
        browser_key=ATTACKER_BROWSER,
        session_id="attacker-session",
    )

    assert attempts == [(409, IN_USE_ELSEWHERE)] * 9
    assert with_session == (409, IN_USE_ELSEWHERE)
    # Nothing of the victim's session moved: same token, same lease, no platform data merged in.
    assert Participation.objects.values().get() == before
    assert before["token_hash"] == token_hash(token)
    assert before["browser_key_hash"] == token_hash(VICTIM_BROWSER)
    assert victim.post(NEXT).json()["assignment_id"] == held["assignment_id"]
    assert (Worker.objects.count(), Participation.objects.count()) == (1, 1)
    # The victim's own browser still gets its token back (a reload, a second tab).
    assert victim_joins(campaign.slug) == token


def test_without_the_token_the_attacker_can_neither_read_nor_submit_nor_erase():
    campaign = crowd_campaign(slug="victim-data", clips=3, candidates_per_clip=2)
    victim = worker_client(victim_joins(campaign.slug))
    rated = rate_one_clip(victim)
    held = victim.post(NEXT).json()

    status, refused = join(
        campaign.slug, platform="prolific", external_id=VICTIM, browser_key=ATTACKER_BROWSER
    )
    # What an attacker could try with whatever they hold: no token, or a made-up one.
    anonymous = APIClient()
    forged = worker_client("x" * 43)
    answers = [
        client.get(ME).status_code for client in (anonymous, forged)
    ] + [
        client.post(
            f"/api/v1/worker/assignments/{held['assignment_id']}/submit",
            {"ratings": all_candidate_ratings(held, value=1, reason="sabotage")},
            format="json",
        ).status_code
        for client in (anonymous, forged)
    ] + [client.post(ERASE, {"confirm": True}, format="json").status_code for client in (anonymous, forged)]  # fmt: skip

    assert (status, "worker_token" in refused) == (409, False)
    assert answers == [401] * 6
    assert Judgment.objects.filter(reason="sabotage").count() == 0
    assert Judgment.objects.count() == len(rated["candidates"])
    assert Worker.objects.filter(external_id=VICTIM).exists()
    assert victim.get(ME).json()["assignments_done"] == 1


def test_the_same_browser_comes_back_after_expiry_and_another_browser_still_cannot(settings):
    settings.LEPUS_WORKER_TOKEN_TTL = 3600
    campaign = crowd_campaign(slug="come-back", clips=2, candidates_per_clip=1)
    first = victim_joins(campaign.slug)
    past = timezone.now() - timedelta(seconds=3601)
    Participation.objects.update(joined_at=past, token_renewed_at=past, last_seen_at=past)

    # An expired session is not up for grabs either: the id alone never gives a token.
    attacker = join(
        campaign.slug, platform="prolific", external_id=VICTIM, browser_key=ATTACKER_BROWSER
    )
    second = victim_joins(campaign.slug)

    assert attacker == (409, IN_USE_ELSEWHERE)
    assert second != first
    assert Participation.objects.get().token_generation == 1
    assert worker_client(second).get(ME).status_code == 200
    assert worker_client(first).get(ME).status_code == 401


def test_a_session_joined_without_a_key_is_bound_by_the_first_join_that_sends_one():
    campaign = crowd_campaign(slug="keyless", clips=1, candidates_per_clip=1)
    _status, keyless = join(campaign.slug, platform="prolific", external_id=VICTIM)

    again = join(campaign.slug, platform="prolific", external_id=VICTIM)
    bound = join(campaign.slug, platform="prolific", external_id=VICTIM, browser_key=VICTIM_BROWSER)
    other = join(
        campaign.slug, platform="prolific", external_id=VICTIM, browser_key=ATTACKER_BROWSER
    )
    none = join(campaign.slug, platform="prolific", external_id=VICTIM)

    assert again == (200, keyless)
    assert bound == (200, keyless)
    assert (other, none) == ((409, IN_USE_ELSEWHERE), (409, IN_USE_ELSEWHERE))
    assert Participation.objects.get().browser_key_hash == token_hash(VICTIM_BROWSER)


@pytest.mark.parametrize("key", ["short", "k" * 201])
def test_a_browser_key_of_the_wrong_length_is_refused(key):
    campaign = crowd_campaign(slug="key-length", clips=1, candidates_per_clip=1)

    status, body = join(campaign.slug, platform="prolific", external_id=VICTIM, browser_key=key)

    assert status == 400
    assert list(body) == ["browser_key"]
    assert Worker.objects.count() == 0


def test_a_workers_own_erasure_reaches_only_the_tokens_campaign(curator):
    first = crowd_campaign(slug="first", clips=2, candidates_per_clip=2)
    second = crowd_campaign(
        slug="second", clips=2, candidates_per_clip=2, erasure_mode=ErasureMode.PSEUDONYMISE
    )
    first_client = worker_client(victim_joins(first.slug))
    second_client = worker_client(victim_joins(second.slug))
    rate_one_clip(first_client)
    rate_one_clip(second_client)

    answer = first_client.post(ERASE, {"confirm": True}, format="json")

    assert answer.status_code == 200
    assert answer.json() == {
        "erased": True,
        "dry_run": False,
        "participations": 1,
        "campaigns": {"first": "delete"},
        "judgments_deleted": 2,
        "judgments_pseudonymised": 0,
        "reasons_erased": 2,
    }
    # The other campaign's participation, judgments, reasons and token are untouched, and the
    # platform id stays for it.
    assert Judgment.objects.filter(campaign=first).count() == 0
    assert list(Judgment.objects.filter(campaign=second).values_list("reason", flat=True)) == [
        "blurry",
        "blurry",
    ]
    assert second_client.get(ME).json()["assignments_done"] == 1
    assert list(Worker.objects.values_list("external_id", flat=True)) == [VICTIM]
    # The curator, having confirmed the person through the platform's messaging, erases the rest.
    page = Client()
    page.force_login(curator)
    participation = Participation.objects.get(campaign=second, worker__external_id=VICTIM)
    form = page.get(f"/dashboard/campaigns/second/workers/{participation.pk}/").content.decode()
    assert "Confirm who is asking first." in form
    assert "Erase only after the person has asked through the crowd" in form
    participant_erase(worker=Worker.objects.get(), actor=curator, requested_by="curator")
    assert Worker.objects.exclude(platform=Platform.ERASED).count() == 0
    assert not Judgment.objects.exclude(reason="").exists()


# --- an exclusion outlives erasure ---------------------------------------------------------------


@pytest.mark.parametrize("mode", [ErasureMode.DELETE, ErasureMode.PSEUDONYMISE])
def test_erasing_oneself_does_not_undo_an_exclusion(curator, mode):
    campaign = crowd_campaign(slug="excluded", clips=3, candidates_per_clip=2, erasure_mode=mode)
    client = worker_client(victim_joins(campaign.slug))
    rated = rate_one_clip(client)
    worker_exclude(participation=Participation.objects.get(), actor=curator, reason="spam")
    assignments_before = Assignment.objects.count()

    erased = client.post(ERASE, {"confirm": True}, format="json")
    rejoins = [
        join(campaign.slug, platform="prolific", external_id=spelling, **browser)
        for spelling in SPELLINGS
        for browser in ({}, {"browser_key": VICTIM_BROWSER}, {"browser_key": ATTACKER_BROWSER})
    ]
    entry = Client().get(f"/w/{campaign.slug}/?PROLIFIC_PID={VICTIM.upper()}")

    assert erased.status_code == 200
    assert rejoins == [(403, SCREEN_OUT)] * 9
    assert entry.status_code == 403
    assert SCREEN_OUT["detail"] in entry.content.decode()
    # The refused joins wrote nothing: no worker, no participation, no clip served.
    assert Worker.objects.exclude(platform=Platform.ERASED).count() == 0
    assert Participation.objects.count() == (1 if mode == ErasureMode.PSEUDONYMISE else 0)
    assert Assignment.objects.count() == (
        assignments_before if mode == ErasureMode.PSEUDONYMISE else 0
    )
    kept = Judgment.objects.filter(campaign=campaign).count()
    assert kept == (len(rated["candidates"]) if mode == ErasureMode.PSEUDONYMISE else 0)
    # What is kept is a keyed hash of the normalised id in this campaign, never the id.
    barred = BarredIdentity.objects.get()
    assert (barred.campaign_id, barred.reason) == (campaign.pk, BarReason.EXCLUDED)
    assert barred.digest == identity_digest(
        campaign_id=campaign.pk, platform="prolific", external_id=VICTIM
    )
    assert VICTIM not in barred.digest and len(barred.digest) == 64


@pytest.mark.parametrize("mode", [ErasureMode.DELETE, ErasureMode.PSEUDONYMISE])
def test_an_erased_person_is_never_served_a_clip_of_the_campaign_again(mode):
    campaign = crowd_campaign(slug="erased", clips=3, candidates_per_clip=2, erasure_mode=mode)
    client = worker_client(victim_joins(campaign.slug))
    rate_one_clip(client)
    assert client.post(ERASE, {"confirm": True}, format="json").status_code == 200
    assignments_before = Assignment.objects.count()

    rejoins = [
        join(campaign.slug, platform="prolific", external_id=spelling, browser_key=VICTIM_BROWSER)
        for spelling in SPELLINGS
    ]

    assert rejoins == [(403, {"detail": ERASED_REJOIN_DETAIL})] * 3
    assert Assignment.objects.count() == assignments_before
    assert Worker.objects.exclude(platform=Platform.ERASED).count() == 0
    assert list(BarredIdentity.objects.values_list("reason", flat=True)) == [BarReason.ERASED]
    # Another campaign is not affected by this one's record.
    other = crowd_campaign(slug="other", clips=1, candidates_per_clip=1)
    assert join(other.slug, platform="prolific", external_id=VICTIM)[0] == 200


def test_a_curators_erasure_bars_the_person_in_every_campaign_under_unrelated_hashes(curator):
    first = crowd_campaign(slug="first", clips=1, candidates_per_clip=1)
    second = crowd_campaign(slug="second", clips=1, candidates_per_clip=1)
    victim_joins(first.slug)
    victim_joins(second.slug)
    worker_exclude(
        participation=Participation.objects.get(campaign=first), actor=curator, reason="spam"
    )

    participant_erase(worker=Worker.objects.get(), actor=curator, requested_by="curator")

    assert dict(BarredIdentity.objects.values_list("campaign__slug", "reason")) == {
        "first": BarReason.EXCLUDED,
        "second": BarReason.ERASED,
    }
    assert len(set(BarredIdentity.objects.values_list("digest", flat=True))) == 2
    assert join(first.slug, platform="prolific", external_id=VICTIM) == (403, SCREEN_OUT)
    assert join(second.slug, platform="prolific", external_id=VICTIM) == (
        403,
        {"detail": ERASED_REJOIN_DETAIL},
    )


def test_the_hash_is_keyed_by_the_exclusion_key(settings):
    campaign = crowd_campaign(slug="keyed", clips=1, candidates_per_clip=1)
    settings.LEPUS_EXCLUSION_KEY = "first-exclusion-key"
    barred_identity_record(
        campaign=campaign, platform="prolific", external_id=VICTIM, reason=BarReason.ERASED
    )
    under_first = identity_digest(campaign_id=campaign.pk, platform="prolific", external_id=VICTIM)

    refused = join(campaign.slug, platform="prolific", external_id=VICTIM)
    settings.LEPUS_EXCLUSION_KEY = "second-exclusion-key"
    under_second = identity_digest(campaign_id=campaign.pk, platform="prolific", external_id=VICTIM)
    after_rotation = join(campaign.slug, platform="prolific", external_id=VICTIM)

    assert refused == (403, {"detail": ERASED_REJOIN_DETAIL})
    assert under_first != under_second
    assert after_rotation[0] == 200  # rotating the key forgets (docs/privacy.md)


def test_an_exclusion_is_never_downgraded_to_an_erasure():
    campaign = crowd_campaign(slug="downgrade", clips=1, candidates_per_clip=1)
    for reason in (BarReason.EXCLUDED, BarReason.ERASED, BarReason.EXCLUDED, BarReason.ERASED):
        barred_identity_record(
            campaign=campaign, platform="prolific", external_id=VICTIM, reason=reason
        )

    assert list(BarredIdentity.objects.values_list("reason", flat=True)) == [BarReason.EXCLUDED]
