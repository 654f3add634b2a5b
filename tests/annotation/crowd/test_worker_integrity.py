"""Crowd integrity in the worker API (issue 18), in process: one person is one worker, exclusion is
per person, worker tokens expire and are revoked, the minimum time on a clip is the server's, the
`me` throttle, pathological JSON, the curator login lockout and the Content-Security-Policy.
tests/hardening/test_crowd_integrity.py replays the findings against a real gunicorn server."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.crowd.api.worker import MeThrottle
from annotation.crowd.services.workers import (
    external_id_normalize,
    invite_token_make,
    token_hash,
    worker_token_expires_at,
)
from annotation.models import (
    Assignment,
    AssignmentStatus,
    Judgment,
    Participation,
    Worker,
)
from common.parsers import MAX_JSON_DEPTH, json_too_deep
from common.ratelimit import counter_hit, login_slowdown_seconds
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign

pytestmark = pytest.mark.django_db

NEXT = "/api/v1/worker/assignments/next"
ME = "/api/v1/worker/me"
# The four spellings of one id the probe joined as four workers.
PROBE_VARIANTS = ["WORKER_A_0001", "worker_a_0001", "WORKER_A_0001\u200b", "ＷＯＲＫＥＲ_A_0001"]
PROLIFIC_ID = "5f1e2d3c4b5a697887766554"


def submit_url(assignment_id: int) -> str:
    return f"/api/v1/worker/assignments/{assignment_id}/submit"


def join(slug: str, **body) -> tuple[int, dict]:
    response = APIClient().post(f"/api/v1/campaigns/{slug}/join", body, format="json")
    return response.status_code, response.json()


def worker_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Worker {token}")
    return client


@pytest.fixture
def campaign():
    return crowd_campaign(clips=3, candidates_per_clip=2, judgments_per_candidate=2)


@pytest.fixture
def checked_ids(settings):
    settings.LEPUS_CHECK_WORKER_IDS = True


# --- one person, one worker ---------------------------------------------------------------------


def test_the_four_spellings_of_the_probe_are_one_worker_with_one_token(campaign):
    answers = [join(campaign.slug, platform="prolific", external_id=v) for v in PROBE_VARIANTS]

    assert [status for status, _body in answers] == [200, 200, 200, 200]
    assert len({body["worker_token"] for _status, body in answers}) == 1
    assert list(Worker.objects.values_list("platform", "external_id")) == [
        ("prolific", "worker_a_0001")
    ]
    assert Participation.objects.count() == 1


@pytest.mark.parametrize(
    ("platform", "variants", "stored"),
    [
        (
            "prolific",
            [
                PROLIFIC_ID,
                PROLIFIC_ID.upper(),
                f" {PROLIFIC_ID}\u200b",
                "\ufeff" + PROLIFIC_ID.translate({ord(c): ord(c) + 0xFEE0 for c in "0123456789"}),
            ],
            PROLIFIC_ID,
        ),
        ("mturk", ["A1B2C3D4E5F6G7", "a1b2c3d4e5f6g7", "Ａ1B2C3D4E5F6G7\u00ad"], "A1B2C3D4E5F6G7"),
    ],
)
def test_variants_of_a_platform_id_are_one_worker_with_the_check_on(
    campaign, checked_ids, platform, variants, stored
):
    tokens = set()
    for variant in variants:
        status, body = join(campaign.slug, platform=platform, external_id=variant)
        assert status == 200, (variant, body)
        tokens.add(body["worker_token"])

    assert len(tokens) == 1
    assert list(Worker.objects.values_list("platform", "external_id")) == [(platform, stored)]


@pytest.mark.parametrize(
    ("platform", "external_id", "message"),
    [
        ("prolific", "WORKER_A_0001", "Not a Prolific participant id (24 hexadecimal characters)."),
        ("prolific", PROLIFIC_ID[:-1], "Not a Prolific participant id (24 hexadecimal characters)."),
        ("prolific", PROLIFIC_ID[:-1] + "g", "Not a Prolific participant id (24 hexadecimal characters)."),
        ("mturk", "B1B2C3D4E5F6G7", "Not an MTurk worker id (A followed by 7 to 31 letters and digits)."),
        ("mturk", "A1B2-C3D4E5F6", "Not an MTurk worker id (A followed by 7 to 31 letters and digits)."),
        ("mturk", "\u200b\u200b", "This field is required."),
    ],
)  # fmt: skip
def test_ids_without_the_platforms_shape_are_refused(
    campaign, checked_ids, platform, external_id, message
):
    status, body = join(campaign.slug, platform=platform, external_id=external_id)

    assert (status, body) == (400, {"external_id": [message]})
    assert Worker.objects.count() == 0


def test_invitee_spellings_are_one_worker(campaign):
    expires = timezone.now() + timedelta(days=1)
    first = invite_token_make(campaign=campaign, invitee="Alice@Lab", expires_at=expires)
    second = invite_token_make(campaign=campaign, invitee="alice@lab\u200b", expires_at=expires)

    status_1, body_1 = join(campaign.slug, platform="invite", invite_token=first)
    status_2, body_2 = join(
        campaign.slug, platform="invite", invite_token=second, external_id="ALICE@LAB"
    )

    assert (status_1, status_2) == (200, 200)
    assert body_1["worker_token"] == body_2["worker_token"]
    assert list(Worker.objects.values_list("external_id", flat=True)) == ["alice@lab"]


def test_normalisation_folds_case_the_way_each_platform_does():
    assert external_id_normalize(platform="prolific", external_id="ABC\u2060") == "abc"
    assert external_id_normalize(platform="mturk", external_id="\tabc ") == "ABC"
    assert external_id_normalize(platform="invite", external_id="Straße") == "strasse"


# --- binding a campaign to its study ------------------------------------------------------------


def test_a_campaign_bound_to_a_prolific_study_refuses_other_studies_and_platforms(campaign):
    study = "6470a1b2c3d4e5f601234567"
    campaign.prolific_study_id = study
    campaign.save(update_fields=["prolific_study_id"])

    other = join(campaign.slug, platform="prolific", external_id="p1", study_id="6470a1b2c3d4e5f6")
    missing = join(campaign.slug, platform="prolific", external_id="p1")
    mturk = join(campaign.slug, platform="mturk", external_id="A1WORKER1", hit_id="H1")
    assert Worker.objects.count() == 0
    same = join(campaign.slug, platform="prolific", external_id="p1", study_id=study.upper())
    invite = invite_token_make(
        campaign=campaign, invitee="guest", expires_at=timezone.now() + timedelta(days=1)
    )
    invited = join(campaign.slug, platform="invite", invite_token=invite)

    assert other == (403, {"detail": "This link belongs to another study."})
    assert missing == (403, {"detail": "This link belongs to another study."})
    assert mturk == (403, {"detail": "This campaign does not take workers from this platform."})
    assert (same[0], invited[0]) == (200, 200)
    assert sorted(Worker.objects.values_list("platform", flat=True)) == ["invite", "prolific"]


def test_a_campaign_bound_to_an_mturk_hit_takes_only_that_hit(campaign):
    campaign.mturk_hit_id = "3XYZHIT0000000000000000000000A"
    campaign.save(update_fields=["mturk_hit_id"])

    wrong = join(campaign.slug, platform="mturk", external_id="A1WORKER1", hit_id="3OTHER")
    right = join(
        campaign.slug, platform="mturk", external_id="A1WORKER1", hit_id=campaign.mturk_hit_id
    )
    prolific = join(campaign.slug, platform="prolific", external_id="p1", study_id="s")

    assert wrong == (403, {"detail": "This link belongs to another study."})
    assert right[0] == 200
    assert prolific == (403, {"detail": "This campaign does not take workers from this platform."})


# --- exclusion is per person --------------------------------------------------------------------


def test_after_exclusion_no_spelling_rejoins_and_the_old_token_reaches_nothing(
    campaign, curator_client
):
    _status, body = join(campaign.slug, platform="prolific", external_id=PROBE_VARIANTS[0])
    worker = worker_client(body["worker_token"])
    held = worker.post(NEXT).json()  # a live lease on one clip
    participation = Participation.objects.get()

    excluded = curator_client.post(
        f"/api/v1/campaigns/{campaign.slug}/quality/workers/{participation.pk}/exclude",
        {"note": "spam"},
        content_type="application/json",
    )
    assert excluded.status_code == 200, excluded.content

    # Every spelling of the person, and the old token on every worker route, answers the same
    # 403 screen-out: no clip, no stored rating.
    screen_out = {
        "detail": "Based on your answers so far, this study has no further clips for you. "
        "Thank you for your time.",
        "state": "screened_out",
        "platform": "prolific",
        "screen_out_code": None,
        "redirect_url": None,
        "instruction": "Please return to Prolific and return your submission there.",
    }
    rejoins = [join(campaign.slug, platform="prolific", external_id=v) for v in PROBE_VARIANTS]
    assert rejoins == [(403, screen_out)] * 4
    for response in (
        worker.post(NEXT),
        worker.get(ME),
        worker.post(
            submit_url(held["assignment_id"]),
            {"ratings": all_candidate_ratings(held)},
            format="json",
        ),
    ):
        assert (response.status_code, response.json()) == (403, screen_out)
    assert Judgment.objects.count() == 0
    assert Assignment.objects.count() == 1
    assert Worker.objects.count() == 1

    # A curator's re-inclusion gives the person back the same token.
    included = curator_client.post(
        f"/api/v1/campaigns/{campaign.slug}/quality/workers/{participation.pk}/include",
        {},
        content_type="application/json",
    )
    assert included.status_code == 200, included.content
    assert worker.get(ME).status_code == 200
    assert join(campaign.slug, platform="prolific", external_id=PROBE_VARIANTS[3]) == (200, body)


def test_a_person_never_gets_a_clip_twice_whichever_spelling_they_join_as(campaign):
    seen: list[int] = []
    for variant in PROBE_VARIANTS * 2:
        _status, body = join(campaign.slug, platform="prolific", external_id=variant)
        client = worker_client(body["worker_token"])
        offered = client.post(NEXT)
        if offered.status_code == 204:
            continue
        payload = offered.json()
        if seen and payload["clip"]["id"] == seen[-1]:
            continue  # the same live lease again, as on a reload
        seen.append(payload["clip"]["id"])
        assert (
            client.post(
                submit_url(payload["assignment_id"]),
                {"ratings": all_candidate_ratings(payload)},
                format="json",
            ).status_code
            == 201
        )

    assert len(seen) == 3
    assert len(set(seen)) == 3


# --- tokens expire ------------------------------------------------------------------------------


def _age(participation: Participation, seconds: float) -> None:
    """Move the participation's activity `seconds` into the past."""
    past = timezone.now() - timedelta(seconds=seconds)
    Participation.objects.filter(pk=participation.pk).update(
        joined_at=past, token_renewed_at=past, last_seen_at=past
    )


def test_a_token_expires_after_the_ttl_without_activity_and_a_rejoin_issues_a_new_one(
    campaign, settings
):
    settings.LEPUS_WORKER_TOKEN_TTL = 3600
    _status, body = join(campaign.slug, platform="prolific", external_id="p1")
    old = worker_client(body["worker_token"])
    participation = Participation.objects.get()
    _age(participation, 3601)

    expired = old.get(ME)
    assert (expired.status_code, expired.json()) == (
        401,
        {"detail": "This worker token has expired. Please open the study link again to continue."},
    )
    status, again = join(campaign.slug, platform="prolific", external_id="P1")
    participation.refresh_from_db()

    assert status == 200
    assert again["worker_token"] != body["worker_token"]
    assert participation.token_generation == 1
    assert participation.token_hash == token_hash(again["worker_token"])
    assert worker_client(again["worker_token"]).get(ME).status_code == 200
    assert old.get(ME).status_code == 401
    # Joining again while the token is live returns it unchanged.
    assert join(campaign.slug, platform="prolific", external_id="p1") == (200, again)


def test_activity_renews_the_token(campaign, settings):
    settings.LEPUS_WORKER_TOKEN_TTL = 3600
    _status, body = join(campaign.slug, platform="prolific", external_id="p1")
    client = worker_client(body["worker_token"])
    participation = Participation.objects.get()
    _age(participation, 3590)  # ten seconds left

    assert client.post(NEXT).status_code == 200
    participation.refresh_from_db()

    left = worker_token_expires_at(participation=participation) - timezone.now()
    assert timedelta(seconds=3500) < left <= timedelta(seconds=3600)


# --- timing on the server -----------------------------------------------------------------------


def test_a_submit_before_the_minimum_time_is_409_and_stores_nothing(campaign):
    campaign.min_seconds_on_clip = 120
    campaign.save(update_fields=["min_seconds_on_clip"])
    _status, body = join(campaign.slug, platform="prolific", external_id="p1")
    client = worker_client(body["worker_token"])
    offered = client.post(NEXT).json()
    submission = {
        "ratings": all_candidate_ratings(offered),
        # Client timing is telemetry: a claim of 1000 s on the clip changes nothing.
        "client_timing": {"active_ms": 999_999, "video_played_ms": 999_999},
    }

    early = client.post(submit_url(offered["assignment_id"]), submission, format="json")

    assert early.status_code == 409
    answer = early.json()
    assert set(answer) == {"detail", "retry_after"}
    assert 118 <= answer["retry_after"] <= 120
    assert early["Retry-After"] == str(answer["retry_after"])
    assert answer["detail"].startswith("Too early: this clip was given to you ")
    assert "at least 120 seconds on each clip" in answer["detail"]
    assert Judgment.objects.count() == 0
    assignment = Assignment.objects.get()
    assert (assignment.status, assignment.submitted_at, assignment.server_ms) == (
        AssignmentStatus.LIVE,
        None,
        None,
    )
    participation = Participation.objects.get()
    assert (participation.assignments_submitted, participation.active_ms_total) == (0, 0)

    # Once the server's clock says 120 s have passed, the same body is stored.
    Assignment.objects.filter(pk=assignment.pk).update(
        issued_at=timezone.now() - timedelta(seconds=121)
    )
    stored = client.post(submit_url(offered["assignment_id"]), submission, format="json")
    assert stored.status_code == 201
    assignment.refresh_from_db()
    assert assignment.server_ms >= 121_000
    assert Judgment.objects.count() == 2


# --- throttles ----------------------------------------------------------------------------------


def test_me_is_throttled_per_worker(campaign, monkeypatch):
    cache.clear()
    monkeypatch.setattr(MeThrottle, "rate", "2/min", raising=False)
    _status, body = join(campaign.slug, platform="prolific", external_id="p1")
    _status, other = join(campaign.slug, platform="prolific", external_id="p2")
    client = worker_client(body["worker_token"])

    codes = [client.get(ME).status_code for _ in range(3)]
    other_code = worker_client(other["worker_token"]).get(ME).status_code
    cache.clear()

    assert codes == [200, 200, 429]
    assert other_code == 200


def test_the_production_settings_throttle_me():
    from annotation.crowd.api.worker import WorkerMeApi
    from config import settings as production

    number, period = MeThrottle().parse_rate(
        production.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["me"]  # type: ignore[index]
    )
    assert WorkerMeApi.throttle_classes == [MeThrottle]
    assert (number, period) == (120, 60)


def test_the_counter_counts_within_one_window():
    cache.clear()
    counts = [counter_hit("test:counter", 60)[0] for _ in range(3)]
    _count, left = counter_hit("test:counter", 60)
    cache.clear()

    assert counts == [1, 2, 3]
    assert 59 < left <= 60


# --- hostile bodies -----------------------------------------------------------------------------


def test_deeply_nested_json_is_400_before_it_is_decoded(campaign):
    nested = "[" * 100_000 + "]" * 100_000
    response = APIClient().post(
        f"/api/v1/campaigns/{campaign.slug}/join", nested, content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "detail": f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels."
    }
    assert Worker.objects.count() == 0


def test_the_depth_scan_counts_only_structure():
    deepest = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert not json_too_deep(deepest, MAX_JSON_DEPTH)
    assert json_too_deep("[" + deepest + "]", MAX_JSON_DEPTH)
    # Brackets and escaped quotes inside strings are text, not structure.
    text = json.dumps({"a": "[" * 100 + '\\"' + "{" * 100})
    assert not json_too_deep(text, MAX_JSON_DEPTH)
    assert json_too_deep(json.dumps(["\\", "x"]) + "[" * 40, MAX_JSON_DEPTH)


@pytest.mark.parametrize(
    "body",
    [
        b'{"platform": "prolific", "external_id": 1' + b"0" * 5000 + b"}",  # an int of 5001 digits
        b'{"platform": "prolific", "external_id": "\xff"}',
        rb'{"platform": "prolific", "external_id": "a\u0000b"}',
        rb'{"platform": "prolific", "external_id": "\ud800"}',
    ],
    ids=["huge-integer", "invalid-utf8", "nul", "lone-surrogate"],
)
def test_other_pathological_bodies_are_400(campaign, body):
    response = APIClient().post(
        f"/api/v1/campaigns/{campaign.slug}/join", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error - ")
    assert Worker.objects.count() == 0


def test_a_number_that_overflows_is_400(campaign):
    response = APIClient().post(
        f"/api/v1/campaigns/{campaign.slug}/join",
        '{"platform": "prolific", "external_id": "p1", "study_id": 1e999}',
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error - number out of range")


# --- curator login lockout ----------------------------------------------------------------------


def _login(client: Client, username: str, password: str, address: str = "127.0.0.1"):
    return client.post(
        "/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


def test_the_login_locks_a_username_from_one_address_after_the_configured_failures(
    curator, settings
):
    cache.clear()
    settings.LEPUS_LOGIN_MAX_FAILURES = 3
    client = Client()
    wrong = [_login(client, "curator", f"guess-{n}").status_code for n in range(3)]
    locked = _login(client, "curator", "curator-password-1")
    elsewhere = _login(Client(), "curator", "curator-password-1", address="10.0.0.9")
    cache.clear()

    assert wrong == [200, 200, 200]
    assert locked.status_code == 429
    assert locked["Retry-After"] == "900"
    assert (
        b"Too many failed log-in attempts from this address. Try again in 15 minutes."
        in locked.content
    )
    assert "_auth_user_id" not in client.session
    # Issue 25: the failures of one address never lock the owner out from another.
    assert elsewhere.status_code == 302


def test_the_slowdown_holds_back_only_the_addresses_that_failed(curator, settings):
    """Guesses from many addresses slow the username down for those addresses; an address that
    has not failed it is never refused, and the wait doubles per failure up to the maximum."""
    cache.clear()
    settings.LEPUS_LOGIN_SLOWDOWN_AFTER = 2
    settings.LEPUS_LOGIN_SLOWDOWN_MAX_SECONDS = 4
    guessers = [f"198.51.100.{n}" for n in range(4)]
    wrong = [_login(Client(), "curator", "guess", address=a).status_code for a in guessers]
    again = _login(Client(), "curator", "guess", address=guessers[0])
    right_from_a_guesser = _login(Client(), "curator", "curator-password-1", address=guessers[1])
    right_from_elsewhere = _login(Client(), "curator", "curator-password-1", address="10.0.0.7")
    cache.clear()

    assert wrong == [200, 200, 200, 200]
    assert again.status_code == 429
    assert 1 <= int(again["Retry-After"]) <= 4
    assert b"Too many failed log-in attempts for this account." in again.content
    assert right_from_a_guesser.status_code == 429
    assert right_from_elsewhere.status_code == 302
    assert [login_slowdown_seconds(n) for n in range(1, 7)] == [0.0, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_after_the_slowdown_a_failed_address_may_try_again(curator, settings):
    cache.clear()
    settings.LEPUS_LOGIN_SLOWDOWN_AFTER = 1
    settings.LEPUS_LOGIN_SLOWDOWN_MAX_SECONDS = 1
    first = _login(Client(), "curator", "guess", address="198.51.100.9")
    held = _login(Client(), "curator", "curator-password-1", address="198.51.100.9")
    time.sleep(1.1)
    later = _login(Client(), "curator", "curator-password-1", address="198.51.100.9")
    cache.clear()

    assert (first.status_code, held.status_code, later.status_code) == (200, 429, 302)


def test_the_login_locks_an_address_after_the_configured_failures(curator, settings):
    cache.clear()
    settings.LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS = 4
    client = Client()
    wrong = [_login(client, f"user{n}", "x", address="203.0.113.7").status_code for n in range(4)]
    locked = _login(client, "curator", "curator-password-1", address="203.0.113.7")
    elsewhere = _login(Client(), "curator", "curator-password-1", address="203.0.113.8")
    cache.clear()

    assert wrong == [200, 200, 200, 200]
    assert locked.status_code == 429
    assert elsewhere.status_code == 302


def test_a_good_login_clears_the_username_failures(curator, settings):
    cache.clear()
    settings.LEPUS_LOGIN_MAX_FAILURES = 3
    codes = []
    for _round in range(2):
        codes += [_login(Client(), "curator", "wrong").status_code for _ in range(2)]
        codes.append(_login(Client(), "curator", "curator-password-1").status_code)
    cache.clear()
    assert codes == [200, 200, 302, 200, 200, 302]


def test_the_lockout_fails_closed_while_its_store_is_unreachable(curator, monkeypatch):
    def unreachable(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache, "get_many", unreachable)
    refused = _login(Client(), "curator", "curator-password-1")

    assert refused.status_code == 503
    assert "Retry-After" not in refused
    assert b"Logging in is temporarily unavailable." in refused.content


# --- Content-Security-Policy --------------------------------------------------------------------


def test_every_page_sends_a_content_security_policy(campaign, curator_client, settings):
    pages = [
        curator_client.get("/dashboard/"),
        curator_client.get("/dashboard/releases/"),
        Client().get("/accounts/login/"),
        curator_client.get("/api/v1/campaigns/"),
    ]
    for response in pages:
        assert response.status_code == 200
        assert response["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in settings.CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in settings.CONTENT_SECURITY_POLICY
    worker_page = Client().get(f"/w/{campaign.slug}/?PROLIFIC_PID={PROLIFIC_ID}")
    assert worker_page.status_code == 200
    assert "frame-ancestors 'self' https://www.mturk.com" in worker_page["Content-Security-Policy"]


def test_the_rating_page_refuses_a_link_whose_id_the_join_would_refuse(campaign, checked_ids):
    refused = Client().get(f"/w/{campaign.slug}/?PROLIFIC_PID=WORKER_A_0001")
    accepted = Client().get(f"/w/{campaign.slug}/?PROLIFIC_PID={PROLIFIC_ID.upper()}")
    preview = Client().get(f"/w/{campaign.slug}/?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE")

    assert refused.status_code == 400
    assert b"This link does not carry a valid participant id." in refused.content
    assert (accepted.status_code, preview.status_code) == (200, 200)
