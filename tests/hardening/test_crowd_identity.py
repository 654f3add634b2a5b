"""Findings 1 and 2 of issue 25, replayed against a real server: gunicorn (two processes of four
threads) with the production settings (DEBUG off, the platform id check on), PostgreSQL and a
private Redis on loopback — the server of tests/hardening/test_crowd_integrity.py. Each test failed
before the fix:

- erasure undid an exclusion: an excluded worker erased themselves with their revoked token, joined
  again with the same id, was served the clip they had rated and their submit was stored (201); now
  the re-join gets the screen-out, in both erasure modes, and nothing is served or stored;
- knowing someone's platform id was enough to act as them: a join with the victim's id returned the
  victim's own token, which then read their progress, submitted in their name and erased their data;
  now a join from a browser other than the victim's gets no token (409) and the victim's data stays.
"""

from __future__ import annotations

import pytest
import requests
from django.contrib.auth.models import User

from annotation.models import (
    Assignment,
    ErasureMode,
    Judgment,
    Participation,
    Platform,
    Worker,
)
from annotation.quality.exclusions import worker_exclude
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign
from tests.hardening import test_crowd_integrity as integrity
from tests.hardening.test_crowd_integrity import ME, NEXT, PROLIFIC_ID, SPELLINGS, Server

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The production-mode gunicorn server of the integrity findings (module scope: one per module).
server = integrity.server
live = integrity.live

ERASE = "/api/v1/worker/erase"
VICTIM_BROWSER = "victim-browser-key-0000000000000000000000000"
ATTACKER_BROWSER = "attacker-browser-key-00000000000000000000000"


def _rate(server: Server, worker: requests.Session, offer: dict) -> requests.Response:
    return worker.post(
        server.submit_url(offer["assignment_id"]),
        json={"ratings": all_candidate_ratings(offer, value=2, reason="blurry")},
        timeout=60,
    )


@pytest.mark.parametrize("mode", [ErasureMode.DELETE, ErasureMode.PSEUDONYMISE])
def test_an_excluded_worker_who_erases_themselves_cannot_come_back(live, mode):
    campaign = crowd_campaign(
        slug=f"erased-{mode}", clips=3, candidates_per_clip=2, erasure_mode=mode
    )
    joined = live.join(
        campaign.slug, platform="prolific", external_id=PROLIFIC_ID, browser_key=VICTIM_BROWSER
    )
    worker = live.worker(joined.json()["worker_token"])
    rated = worker.post(f"{live.url}{NEXT}", timeout=60).json()
    assert _rate(live, worker, rated).status_code == 201
    curator = User.objects.create_user(f"identity-curator-{mode}")
    worker_exclude(participation=Participation.objects.get(), actor=curator, reason="spam")
    judgments_before = Judgment.objects.filter(campaign=campaign).count()

    erased = worker.post(f"{live.url}{ERASE}", json={"confirm": True}, timeout=60)
    rejoins = [
        live.join(campaign.slug, platform="prolific", external_id=spelling, browser_key=key)
        for spelling in SPELLINGS
        for key in (VICTIM_BROWSER, ATTACKER_BROWSER)
    ]
    # Whatever a re-join might have handed out, try to use it as the probe did.
    tokens = [answer.json().get("worker_token") for answer in rejoins]
    served = [
        live.worker(token).post(f"{live.url}{NEXT}", timeout=60)
        for token in tokens
        if token is not None
    ]

    assert erased.status_code == 200, erased.text
    assert [answer.status_code for answer in rejoins] == [403] * len(rejoins)
    assert {answer.json()["state"] for answer in rejoins} == {"screened_out"}
    assert served == []
    assert Worker.objects.exclude(platform=Platform.ERASED).count() == 0
    kept = judgments_before if mode == ErasureMode.PSEUDONYMISE else 0
    assert Judgment.objects.filter(campaign=campaign).count() == kept
    assert Assignment.objects.filter(clip_id=rated["clip"]["id"]).count() == (
        1 if mode == ErasureMode.PSEUDONYMISE else 0
    )
    integrity._assert_no_server_error(live)


def test_knowing_a_victims_id_gives_no_way_into_their_session(live):
    campaign = crowd_campaign(slug="victim", clips=3, candidates_per_clip=2)
    victim_token = live.join(
        campaign.slug, platform="prolific", external_id=PROLIFIC_ID, browser_key=VICTIM_BROWSER
    ).json()["worker_token"]
    victim = live.worker(victim_token)
    rated = victim.post(f"{live.url}{NEXT}", timeout=60).json()
    assert _rate(live, victim, rated).status_code == 201
    held = victim.post(f"{live.url}{NEXT}", timeout=60).json()

    # The attacker knows the id and tries every spelling, with no browser key and with their own.
    attempts = [
        live.join(campaign.slug, platform="prolific", external_id=spelling, **key)
        for spelling in SPELLINGS
        for key in ({}, {"browser_key": ATTACKER_BROWSER})
    ]
    stolen = [answer.json().get("worker_token") for answer in attempts]
    stolen = [token for token in stolen if token is not None]
    # With whatever token the joins gave, the attacker reads, submits and erases.
    reads = [live.worker(token).get(f"{live.url}{ME}", timeout=60) for token in stolen]
    submits = [
        live.worker(token).post(
            live.submit_url(held["assignment_id"]),
            json={"ratings": all_candidate_ratings(held, value=1, reason="sabotage")},
            timeout=60,
        )
        for token in stolen
    ]
    erases = [
        live.worker(token).post(f"{live.url}{ERASE}", json={"confirm": True}, timeout=60)
        for token in stolen
    ]

    assert [answer.status_code for answer in attempts] == [409] * len(attempts)
    assert {answer.json()["state"] for answer in attempts} == {"in_use_elsewhere"}
    assert (stolen, reads, submits, erases) == ([], [], [], [])
    # The victim's session and data are whole: their token works, their lease is still theirs.
    me = victim.get(f"{live.url}{ME}", timeout=60)
    assert me.status_code == 200
    assert (me.json()["assignments_done"], me.json()["live_assignment_id"]) == (
        1,
        held["assignment_id"],
    )
    assert not Judgment.objects.filter(reason="sabotage").exists()
    assert Judgment.objects.filter(reason="blurry").count() == len(rated["candidates"])
    assert list(Worker.objects.values_list("external_id", flat=True)) == [PROLIFIC_ID]
    # The victim's own browser comes back to the same session.
    again = live.join(
        campaign.slug, platform="prolific", external_id=PROLIFIC_ID, browser_key=VICTIM_BROWSER
    )
    assert again.json() == {"worker_token": victim_token}
    integrity._assert_no_server_error(live)
