"""Hostile input, beyond the worker API's own contract tests (tests/annotation/crowd/test_worker_api.py):
CSRF on every form and every session-authenticated API write, size limits on submissions, forms
and imports, throttles, forged or foreign invites and assignment ids, malformed ratings, and
`manage.py check --deploy` on the production settings."""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import subprocess
import sys
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from annotation.crowd.api.worker import JoinThrottle
from annotation.crowd.services.workers import INVITE_SALT, invite_token_make
from annotation.models import (
    Assignment,
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    Worker,
)
from datasets_app.models import CandidateCaption, Clip, ImportBatch, ReferenceCaption
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign, crowd_join
from tests.hardening.test_permission_matrix import ROUTES, Case, _isolated, _outcome
from tests.hardening.world import (
    NEXT,
    World,
    build_world,
    role_client,
    submit_url,
    worker_client,
)
from tests.support.processes import REPO_ROOT

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(curator, admin_user, outsider) -> World:  # type: ignore[no-untyped-def]
    return build_world(curator=curator, admin=admin_user, outsider=outsider)


def _stored(world: World | None = None) -> dict[str, Any]:
    """What a refused request must leave untouched."""
    return {
        "judgments": sorted(
            Judgment.objects.values_list("participation_id", "campaign_candidate_id", "values")
        ),
        "assignments": sorted(Assignment.objects.values_list("pk", "status", "submission_digest")),
        "participations": sorted(
            Participation.objects.values_list("pk", "assignments_submitted", "status")
        ),
        "workers": Worker.objects.count(),
        "campaigns": sorted(Campaign.objects.values_list("slug", "name", "description")),
    }


# --- CSRF ---------------------------------------------------------------------------------------


def _csrf_client(world: World, role: str) -> tuple[Client, str]:
    """A client that enforces CSRF like a browser would meet it, and its CSRF cookie value."""
    client = role_client(world, role, enforce_csrf_checks=True)
    assert client.get("/accounts/login/").status_code == 200  # sets the csrftoken cookie
    return client, client.cookies["csrftoken"].value


# The preview's JSON endpoints take no cookie: a signed preview token in a header (or, to join,
# in the body) is their only credential, as the worker API's, so there is no session to forge a
# request with and CSRF does not apply (annotation/crowd/views/preview.py). Without the token they
# refuse (tests/annotation/crowd/test_preview.py and the permission matrix).
TOKEN_ONLY_ROUTES = (
    "annotation:preview-join",
    "annotation:preview-next",
    "annotation:preview-submit",
    # The demo's webhook receiver takes signed deliveries from Lepus's own worker, never a session
    # (csrf_exempt; off, 404, unless the demo's setting is on).
    "webhooks:demo-receiver-deliver",
)


def _writes(*, api: bool) -> list[tuple[str, Case]]:
    return [
        (route, case)
        for route, cases in ROUTES.items()
        for case in cases
        if case.method != "GET"
        and route not in TOKEN_ONLY_ROUTES
        and route.startswith(("annotation_api:", "export_api:", "training_bridge_api:")) == api
    ]


def _send(client: Client, case: Case, world: World, path: str, token: str | None) -> Any:
    body = case.body(world) if case.body else {}
    method = getattr(client, case.method.lower())
    if case.json:
        headers = {"HTTP_X_CSRFTOKEN": token} if token else {}
        return method(path, json.dumps(body), content_type="application/json", **headers)
    if token:
        body = {**body, "csrfmiddlewaretoken": token}
    return method(path, body)


def test_every_form_post_is_refused_without_the_csrf_token_and_accepted_with_it(world):
    """Each page route that takes a POST, as the curator (who can do them all): without the
    token 403 and nothing changes; with it, the outcome of the permission matrix."""
    writes = _writes(api=False)
    assert len(writes) >= 20, writes  # every dashboard and account form
    wrong = []
    for route, case in writes:
        client, token = _csrf_client(world, "curator")
        path = case.path(world)
        before = _stored(world)
        refused = _isolated(lambda: _send(client, case, world, path, None))  # noqa: B023
        after_refused = _stored(world)
        accepted = _isolated(lambda: _outcome(_send(client, case, world, path, token)))  # noqa: B023
        if refused.status_code != 403 or b"CSRF" not in refused.content:
            wrong.append(f"{route}: {case.method} without a token: {refused.status_code}")
        if after_refused != before:
            wrong.append(f"{route}: a refused request changed the data")
        if accepted != case.expect["curator"]:
            wrong.append(f"{route}: with the token {accepted}, expected {case.expect['curator']}")
    assert not wrong, "\n".join(wrong)


def test_curator_api_writes_through_a_session_need_the_csrf_token(world):
    """DRF's SessionAuthentication enforces CSRF for logged-in users: a forged cross-site request
    riding a curator's cookie is refused."""
    writes = [
        (route, case)
        for route, case in _writes(api=True)
        if case.expect["curator"] not in (401,) and route != "annotation_api:campaign-join"
    ]
    assert len(writes) >= 20, writes
    wrong = []
    for route, case in writes:
        client, token = _csrf_client(world, "curator")
        path = case.path(world)
        refused = _isolated(lambda: _send(client, case, world, path, None))  # noqa: B023
        accepted = _isolated(lambda: _outcome(_send(client, case, world, path, token)))  # noqa: B023
        if refused.status_code != 403 or "CSRF" not in refused.json().get("detail", ""):
            wrong.append(f"{route}: {case.method} without a token: {refused.status_code}")
        if accepted != case.expect["curator"]:
            wrong.append(f"{route}: with the token {accepted}, expected {case.expect['curator']}")
    assert not wrong, "\n".join(wrong)


def test_the_worker_api_reads_no_cookie_so_csrf_does_not_apply(world):
    """Workers authenticate with a header a cross-site form cannot set, and never with a cookie:
    a curator's (or anyone's) session reaches none of the worker endpoints, so there is nothing
    for a forged request to ride on. Joining takes no credentials at all and only ever creates
    the caller's own participation, so it needs no token either."""
    client, _token = _csrf_client(world, "curator")
    with_cookie_only = [
        client.post(NEXT).status_code,
        client.get("/api/v1/worker/me").status_code,
        client.post(
            submit_url(world.live_a.pk),
            json.dumps({"ratings": all_candidate_ratings(world.offer_a)}),
            content_type="application/json",
        ).status_code,
    ]
    worker = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Worker {world.token_a}")
    joined = Client(enforce_csrf_checks=True).post(
        f"/api/v1/campaigns/{world.campaign.slug}/join",
        json.dumps({"platform": "prolific", "external_id": "csrf-less"}),
        content_type="application/json",
    )

    assert with_cookie_only == [401, 401, 401]
    assert worker.post(NEXT).json()["assignment_id"] == world.live_a.pk
    assert joined.status_code == 200


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "form":
            self.forms.append(
                {
                    "id": values.get("id"),
                    "method": (values.get("method") or "get").lower(),
                    "csrf": False,
                }
            )
        elif tag == "input" and values.get("name") == "csrfmiddlewaretoken" and self.forms:
            self.forms[-1]["csrf"] = True


def test_every_post_form_on_every_page_carries_the_csrf_token(world):
    pages = [
        (route, case)
        for route, cases in ROUTES.items()
        for case in cases
        if case.method == "GET" and case.expect["curator"] == 200 and "api" not in route
    ]
    client = role_client(world, "curator")
    post_forms = 0
    missing = []
    for route, case in pages:
        response = client.get(case.path(world))
        if not response["Content-Type"].startswith("text/html"):
            continue
        parser = _Forms()
        parser.feed(response.content.decode())
        for form in parser.forms:
            # The rating page's MTurk form posts cross-site to MTurk's externalSubmit (its action
            # is set by worker.js; CSP form-action allows only MTurk's hosts); it must not carry
            # our token.
            if form["method"] == "post" and form["id"] != "mturk-form":
                post_forms += 1
                if not form["csrf"]:
                    missing.append(route)
    assert post_forms >= 10
    assert not missing


# --- size limits --------------------------------------------------------------------------------


def test_an_oversized_submission_is_413_and_stores_nothing(world):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # LEPUS_MAX_REQUEST_BYTES
    ratings = all_candidate_ratings(world.offer_a, value=1, reason="x" * (limit + 1))
    before = _stored(world)

    response = worker_client(world.token_a).post(
        submit_url(world.live_a.pk), {"ratings": ratings}, content_type="application/json"
    )

    assert response.status_code == 413
    assert response.json() == {"detail": f"Request body too large (at most {limit} bytes)."}
    assert _stored(world) == before


def test_an_oversized_join_is_413_and_creates_nobody(world):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    before = _stored(world)

    response = Client().post(
        f"/api/v1/campaigns/{world.campaign.slug}/join",
        {"platform": "prolific", "external_id": "big", "session_id": "s" * (limit + 1)},
        content_type="application/json",
    )

    assert response.status_code == 413
    assert _stored(world) == before


def test_an_oversized_form_is_a_clean_400_and_stores_nothing(world):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    client = role_client(world, "curator")
    before = _stored(world)

    response = client.post(
        f"/dashboard/campaigns/{world.campaign.slug}/edit/",
        {"name": "renamed", "description": "d" * (limit + 1)},
    )

    assert response.status_code == 400
    assert b"Traceback" not in response.content
    assert _stored(world) == before


def _oversize_file(tmp_path: Path, name: str, size: int) -> Path:
    path = tmp_path / name
    path.write_bytes(b" " * size)
    return path


@pytest.mark.parametrize(
    ("command", "file_name", "extra"),
    [
        ("import_vatex", "vatex.json", []),
        ("import_vatex_eval", "vid_cans_score_dict.json", []),
        ("import_candidates", "candidates.jsonl", []),
        ("import_judgments", "judgments.jsonl", ["--campaign", "imports"]),
    ],
)
def test_every_import_command_refuses_a_file_over_the_import_limit(
    tmp_path, settings, command, file_name, extra
):
    crowd_campaign(clips=1, slug="imports")
    settings.LEPUS_MAX_IMPORT_BYTES = 4096
    path = _oversize_file(tmp_path, file_name, 4097)
    counts = [model.objects.count() for model in (Clip, CandidateCaption, ReferenceCaption)]
    counts += [Judgment.objects.count(), ImportBatch.objects.count()]

    with pytest.raises(CommandError) as refused:
        call_command(command, str(path), *extra, stdout=io.StringIO(), stderr=io.StringIO())

    assert str(refused.value) == (
        f"{path}: the file is 4097 bytes, over the import limit of 4096 bytes "
        "(LEPUS_MAX_IMPORT_BYTES)"
    )
    after = [model.objects.count() for model in (Clip, CandidateCaption, ReferenceCaption)]
    assert [*after, Judgment.objects.count(), ImportBatch.objects.count()] == counts


# --- throttles ----------------------------------------------------------------------------------


def test_the_production_rates_throttle_join_next_and_submit():
    """The views carry their throttles and the settings give each scope a finite rate (the
    contract tests lower the rate and assert the 429 itself)."""
    from annotation.crowd.api.worker import (
        AssignmentNextApi,
        AssignmentSubmitApi,
        CampaignJoinApi,
        NextThrottle,
        SubmitThrottle,
    )
    from config import settings as production

    rates = production.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert CampaignJoinApi.throttle_classes == [JoinThrottle]
    assert AssignmentNextApi.throttle_classes == [NextThrottle]
    assert AssignmentSubmitApi.throttle_classes == [SubmitThrottle]
    for scope in ("join", "next", "submit"):
        number, period = JoinThrottle().parse_rate(rates[scope])
        assert 0 < number <= 1000 and period == 60, (scope, rates[scope])


def test_a_throttled_join_says_when_to_retry_and_creates_nobody(world, monkeypatch):
    cache.clear()
    monkeypatch.setattr(JoinThrottle, "rate", "1/min", raising=False)
    url = f"/api/v1/campaigns/{world.campaign.slug}/join"
    first = Client().post(url, {"platform": "prolific", "external_id": "t1"}, "application/json")
    workers = Worker.objects.count()
    second = Client().post(url, {"platform": "prolific", "external_id": "t2"}, "application/json")
    cache.clear()

    assert (first.status_code, second.status_code) == (200, 429)
    assert 0 < int(second["Retry-After"]) <= 60
    assert Worker.objects.count() == workers


def test_a_made_up_forwarded_for_header_does_not_dodge_the_join_throttle(world, monkeypatch):
    cache.clear()
    monkeypatch.setattr(JoinThrottle, "rate", "1/min", raising=False)
    url = f"/api/v1/campaigns/{world.campaign.slug}/join"
    codes = [
        Client(HTTP_X_FORWARDED_FOR=f"198.51.100.{number}")
        .post(url, {"platform": "prolific", "external_id": f"xff{number}"}, "application/json")
        .status_code
        for number in range(3)
    ]
    cache.clear()
    assert codes == [200, 429, 429]


# --- invites and assignment ids -----------------------------------------------------------------


def _join_with_invite(world: World, token: str) -> tuple[int, dict[str, Any]]:
    response = Client().post(
        f"/api/v1/campaigns/{world.campaign.slug}/join",
        {"platform": "invite", "invite_token": token},
        content_type="application/json",
    )
    return response.status_code, response.json()


def _invites(world: World) -> dict[str, str]:
    later = timezone.now() + timedelta(days=1)
    valid = invite_token_make(campaign=world.campaign, invitee="alice", expires_at=later)
    # The payload re-signed with a key that is not the server's.
    foreign_key = signing.dumps(
        {"c": world.campaign.slug, "i": "mallory", "e": int(later.timestamp())},
        key="not-the-server-secret-" + "x" * 40,
        salt=INVITE_SALT,
    )
    # The payload edited (another invitee) with the original signature kept.
    _payload, signature = valid.split(":", 1)
    edited_payload = signing.b64_encode(
        json.dumps(
            {"c": world.campaign.slug, "i": "mallory", "e": int(later.timestamp())},
            separators=(",", ":"),
        ).encode()
    ).decode()
    other = crowd_campaign(clips=1, candidates_per_clip=1, slug="other-campaign")
    return {
        "edited": f"{edited_payload}:{signature}",
        "foreign key": foreign_key,
        "truncated": valid[: len(valid) // 2],
        "garbage": "<script>alert(1)</script>",
        "expired": invite_token_make(
            campaign=world.campaign,
            invitee="alice",
            expires_at=timezone.now() - timedelta(seconds=1),
        ),
        "other campaign": invite_token_make(campaign=other, invitee="alice", expires_at=later),
        "no expiry": signing.dumps(
            {"c": world.campaign.slug, "i": "alice"},
            key=settings.LEPUS_INVITE_SECRET,
            salt=INVITE_SALT,
        ),
    }


def test_forged_edited_foreign_or_expired_invites_are_refused_by_the_api_and_the_page(world):
    invites = _invites(world)
    before = _stored(world)
    invalid = "This invite link is not valid."
    expected = {
        "edited": invalid,
        "foreign key": invalid,
        "truncated": invalid,
        "garbage": invalid,
        "expired": "This invite link has expired.",
        "other campaign": "This invite link belongs to another campaign.",
        "no expiry": invalid,
    }

    api = {name: _join_with_invite(world, token) for name, token in invites.items()}
    pages = {
        name: Client().get(f"/w/{world.campaign.slug}/", {"invite": token})
        for name, token in invites.items()
    }

    assert api == {name: (403, {"detail": message}) for name, message in expected.items()}
    for name, page in pages.items():
        assert page.status_code == 403, name
        assert expected[name] in page.content.decode(), name
        assert "<script>alert(1)</script>" not in page.content.decode()
    assert _stored(world) == before


def test_an_invite_stops_working_when_the_invite_secret_changes(world, settings):
    token = invite_token_make(
        campaign=world.campaign, invitee="alice", expires_at=timezone.now() + timedelta(days=1)
    )
    settings.LEPUS_INVITE_SECRET = "a-rotated-invite-secret-" + "y" * 40

    assert _join_with_invite(world, token) == (403, {"detail": "This invite link is not valid."})


@pytest.mark.parametrize("assignment_id", ["0", "99999999999999999999", "-1", "1e3", "%20", "abc"])
def test_malformed_or_unknown_assignment_ids_are_404(world, assignment_id):
    before = _stored(world)
    response = worker_client(world.token_a).post(
        f"/api/v1/worker/assignments/{assignment_id}/submit",
        {"ratings": all_candidate_ratings(world.offer_a)},
        content_type="application/json",
    )
    assert response.status_code == 404
    assert _stored(world) == before


def test_a_replay_in_another_order_and_with_other_timing_is_the_same_submission(world):
    client = worker_client(world.token_a)
    ratings = all_candidate_ratings(world.offer_a, value=2, reason="vague")
    first = client.post(
        submit_url(world.live_a.pk),
        {"ratings": ratings, "client_timing": {"active_ms": 1000}},
        content_type="application/json",
    )
    stored = _stored(world)

    replay = client.post(
        submit_url(world.live_a.pk),
        {"ratings": list(reversed(ratings)), "client_timing": {"active_ms": 99}},
        content_type="application/json",
    )
    changed = client.post(
        submit_url(world.live_a.pk),
        {"ratings": [{**ratings[0], "reason": "another reason"}, *ratings[1:]]},
        content_type="application/json",
    )

    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay.json() == first.json()
    assert changed.status_code == 409
    assert _stored(world) == stored


# --- malformed ratings --------------------------------------------------------------------------


def test_candidates_of_another_clip_or_campaign_and_malformed_ids_are_field_errors(world):
    other = crowd_campaign(clips=1, candidates_per_clip=1, slug="elsewhere")
    same_campaign_other_clip = (
        CampaignCandidate.objects.filter(campaign=world.campaign)
        .exclude(clip_id=world.live_a.clip_id)
        .values_list("pk", flat=True)
        .first()
    )
    other_campaign = CampaignCandidate.objects.get(campaign=other).pk
    good = all_candidate_ratings(world.offer_a)
    first = {key: value for key, value in good[0].items() if key != "candidate_id"}
    cases = [
        (
            [*good, {**first, "candidate_id": same_campaign_other_clip}],
            {"ratings[2].candidate_id": ["Not a candidate of this assignment."]},
        ),
        (
            [*good, {**first, "candidate_id": other_campaign}],
            {"ratings[2].candidate_id": ["Not a candidate of this assignment."]},
        ),
        (
            [good[0], {**good[1], "candidate_id": other_campaign}],
            {
                "ratings": [f"Missing ratings for candidates: {good[1]['candidate_id']}."],
                "ratings[1].candidate_id": ["Not a candidate of this assignment."],
            },
        ),
        ([{**good[0], "candidate_id": str(good[0]["candidate_id"])}, good[1]], "ratings[0]"),
        ([{**good[0], "candidate_id": None}, good[1]], "ratings[0]"),
        ([{**good[0], "candidate_id": float(good[0]["candidate_id"])}, good[1]], "ratings[0]"),
        ([first, good[1]], "ratings[0]"),
        ([good[0]] * 500 + [good[1]], "ratings"),
        ([good[0], "not an object"], "ratings[1]"),
        ([], "ratings"),
    ]
    before = _stored(world)
    wrong = []
    for ratings, errors in cases:
        response = worker_client(world.token_a).post(
            submit_url(world.live_a.pk), {"ratings": ratings}, content_type="application/json"
        )
        body = response.json()
        if isinstance(errors, str):
            matches = any(key.startswith(errors) for key in body)
        else:
            matches = body == errors
        if response.status_code != 400 or not matches:
            wrong.append((ratings[:3], response.status_code, body))
    assert not wrong
    assert _stored(world) == before


def test_ratings_outside_a_custom_questions_levels_are_refused(world):
    questions = [
        {
            "key": "overall",
            "label": "Overall",
            "levels": [
                {"value": 0, "label": "No", "description": "wrong"},
                {"value": 2, "label": "Partly", "description": "partly right"},
                {"value": 4, "label": "Yes", "description": "right"},
            ],
        }
    ]
    campaign = crowd_campaign(
        clips=1, candidates_per_clip=2, slug="levels", questions=questions, rubric="custom"
    )
    token, _participation = crowd_join(campaign, "level-worker")
    client = worker_client(token)
    offer = client.post(NEXT).json()
    assert [level["value"] for level in offer["questions"][0]["levels"]] == [0, 2, 4]
    before = _stored()

    answers = {
        value: client.post(
            submit_url(offer["assignment_id"]),
            {"ratings": all_candidate_ratings(offer, value=value)},
            content_type="application/json",
        )
        for value in (1, 3, 5, -2)
    }

    assert {value: answer.status_code for value, answer in answers.items()} == dict.fromkeys(
        answers, 400
    )
    assert answers[1].json() == {
        "ratings[0].overall": ["Must be one of 0, 2, 4."],
        "ratings[1].overall": ["Must be one of 0, 2, 4."],
    }
    assert _stored() == before
    accepted = client.post(
        submit_url(offer["assignment_id"]),
        {"ratings": all_candidate_ratings(offer, value=2)},
        content_type="application/json",
    )
    assert accepted.status_code == 201


# --- deployment checks --------------------------------------------------------------------------


def _check_deploy(**overrides: str | None) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
        "DJANGO_ALLOWED_HOSTS": "lepus.example.org",
        "DATABASE_URL": settings.DATABASE_URL,
        "LEPUS_VAR_DIR": str(Path(settings.VAR_DIR) / "check-deploy"),
        # A production deployment's shared services (lepus.W001-W003, W008); nothing connects.
        "REDIS_URL": "redis://cache.example.org:6379/1",
        "CELERY_BROKER_URL": "amqp://broker.example.org:5672//",
        "LEPUS_S3_BUCKET": "lepus-media",
        "LEPUS_RELEASE_PSEUDONYM_SECRET": secrets.token_urlsafe(48),
        **overrides,
    }
    environment = {name: value for name, value in environment.items() if value is not None}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_passes_with_the_production_settings():
    result = _check_deploy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_check_deploy_catches_an_insecure_configuration():
    """The check has teeth: turning off HTTPS redirects and secure cookies is reported."""
    result = _check_deploy(DJANGO_SECURE_SSL_REDIRECT="false", DJANGO_SECURE_COOKIES="false")
    assert result.returncode == 1
    for check in ("security.W008", "security.W012", "security.W016"):
        assert check in result.stderr, result.stderr


def test_check_deploy_warns_when_the_throttles_count_per_process():
    """Issue 25: with REDIS_URL unset the throttles and the login lockout count per process, and
    `check --deploy` said nothing; now lepus.W001 fails the check (and only it)."""
    result = _check_deploy(REDIS_URL=None)
    assert result.returncode == 1
    assert re.findall(r"\((\w+\.\w+)\)", result.stderr) == ["lepus.W001"], result.stderr
    assert "REDIS_URL is not set" in result.stderr
