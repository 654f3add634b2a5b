"""Issue 25's findings 3, 4 and 8, replayed against a real server: the gunicorn of
tests/hardening/test_crowd_integrity.py (gthread, two processes of four threads, `config.settings`
with DEBUG off, the test database on PostgreSQL, a private Redis, all on loopback). Each test
failed on the code before the fix:

- three wrong passwords from one address locked the username for every address: the right
  password from another address got 429; now only that (username, address) pair is locked, and
  guessing from many addresses meets a per-username slow-down that never holds back an address
  that has not failed;
- `POST /dashboard/campaigns/<slug>/preview/join` (and preview submit) with a body nested 120,000
  deep was a 500 (RecursionError); now every route of the URL configuration, sent such a body with
  POST, PUT and PATCH, answers below 500, and every view that reads it answers the parser's 400;
- `/accounts/password_reset/` was mounted, unthrottled, with no mail configured; now it is not.

Clients other than 127.0.0.1 are real: Linux routes all of 127.0.0.0/8 to loopback, so a client
socket bound to 127.0.0.2 reaches the server as another address (no X-Forwarded-For trusted).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group, User
from requests.adapters import HTTPAdapter

from annotation.crowd.services.preview import preview_token_issue
from annotation.models import Campaign
from common.parsers import MAX_JSON_DEPTH
from common.permissions import CURATOR_GROUP
from tests.hardening import test_crowd_integrity as integrity
from tests.hardening.test_crowd_integrity import LOGIN_LIMIT, Server
from tests.hardening.test_permission_matrix import ROUTES, _route_names
from tests.hardening.world import build_world

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The integrity tests' server (one per module) and its per-test reset of the Redis counters.
server = integrity.server
live = integrity.live

PASSWORD = "production-curator-password-1"
DEPTH = 120_000
NESTED = "[" * DEPTH + "]" * DEPTH
TOO_DEEP = {"detail": f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels."}
# The server's defaults (config.settings): the slow-down starts after this many failures of one
# username, all addresses together.
SLOWDOWN_AFTER = 10


class _FromAddress(HTTPAdapter):
    """Connections from a given loopback source address."""

    def __init__(self, address: str) -> None:
        self._address = address
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (self._address, 0)
        super().init_poolmanager(*args, **kwargs)


def _session_from(address: str) -> requests.Session:
    session = requests.Session()
    session.mount("http://", _FromAddress(address))
    return session


def _login(
    server: Server, password: str, address: str, username: str = "owner"
) -> tuple[requests.Session, requests.Response]:
    session = _session_from(address)
    session.get(f"{server.url}/accounts/login/", timeout=60).raise_for_status()
    response = session.post(
        f"{server.url}/accounts/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        allow_redirects=False,
        timeout=60,
    )
    return session, response


def _with_password(user: User) -> User:
    # The server runs the production hashers; the suite's MD5 hasher is not among them.
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, "productionsalt01")
    user.save(update_fields=["password"])
    user.groups.add(Group.objects.get_or_create(name=CURATOR_GROUP)[0])
    return user


def _assert_no_server_error(server: Server) -> None:
    log = server.log()
    assert "Traceback" not in log, log[-3000:]
    assert "RecursionError" not in log


# --- finding 3: the curator login ---------------------------------------------------------------


def test_failures_from_one_address_never_lock_the_owner_out(live):
    _with_password(User.objects.create_user("owner"))

    wrong = [_login(live, f"guess-{n}", "127.0.0.1")[1].status_code for n in range(LOGIN_LIMIT)]
    _same, locked = _login(live, PASSWORD, "127.0.0.1")
    owner, elsewhere = _login(live, PASSWORD, "127.0.0.2")

    assert wrong == [200] * LOGIN_LIMIT
    assert elsewhere.status_code == 302, elsewhere.text[:500]
    assert locked.status_code == 429
    assert locked.headers["Retry-After"] == "900"
    assert "sessionid" in owner.cookies
    assert owner.get(f"{live.url}/dashboard/", timeout=60).status_code == 200
    _assert_no_server_error(live)


def test_guessing_from_many_addresses_is_slowed_for_those_addresses_only(live):
    _with_password(User.objects.create_user("owner"))
    guessers = [f"127.0.0.{n}" for n in range(10, 10 + SLOWDOWN_AFTER + 2)]

    first_guesses = [_login(live, "guess", address)[1].status_code for address in guessers]
    _again, second_guess = _login(live, "guess-2", guessers[0])
    _right, right_from_a_guesser = _login(live, PASSWORD, guessers[1])
    owner, right_from_elsewhere = _login(live, PASSWORD, "127.0.0.99")

    # One failure per address locks no pair; the 12 failures of the username slow it down.
    assert first_guesses == [200] * len(guessers)
    assert (second_guess.status_code, right_from_a_guesser.status_code) == (429, 429)
    assert 1 <= int(second_guess.headers["Retry-After"]) <= 4
    assert "Too many failed log-in attempts for this account." in second_guess.text
    assert right_from_elsewhere.status_code == 302
    assert "sessionid" in owner.cookies
    _assert_no_server_error(live)


# --- finding 8: no password reset without mail -------------------------------------------------


def test_the_password_reset_flow_is_not_mounted(live):
    session = requests.Session()
    answers = [
        session.get(f"{live.url}/accounts/password_reset/", timeout=60),
        session.post(f"{live.url}/accounts/password_reset/", data={"email": "a@b.c"}, timeout=60),
        session.get(f"{live.url}/accounts/reset/MQ/x-y/", timeout=60),
    ]
    assert [answer.status_code for answer in answers] == [404, 404, 404]
    assert session.get(f"{live.url}/accounts/login/", timeout=60).status_code == 200


# --- finding 4: one JSON parser for every body -------------------------------------------------


def _every_route_path(world) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(route, path) of every route of the URL configuration outside Django's admin, its path
    arguments filled with the world's rows (the permission matrix's first case of the route;
    test_permission_matrix.py fails on a route without one). Logging out comes last."""
    routes = sorted(_route_names(), key=lambda name: (name == "logout", name))
    return [(route, ROUTES[route][0].path(world).split("?")[0]) for route in routes]


def test_every_route_answers_a_120000_deep_body_below_500(live, curator, admin_user, outsider):
    world = build_world(curator=_with_password(curator), admin=admin_user, outsider=outsider)
    preview_token = preview_token_issue(campaign=world.campaign, user=curator)
    session, status = _login(live, PASSWORD, "127.0.0.1", username=curator.username)
    assert status.status_code == 302
    csrf = session.cookies["csrftoken"]
    answers: dict[tuple[str, str, str], int] = {}
    bodies: dict[tuple[str, str, str], str] = {}
    for route, path in _every_route_path(world):
        # Everything a request can carry: the curator's session and CSRF token, and the worker
        # token (the preview token on the preview's routes) that worker routes read.
        token = preview_token if ":preview-" in route else world.token_a
        for method in ("POST", "PUT", "PATCH"):
            answer = session.request(
                method,
                f"{live.url}{path}",
                data=NESTED,
                headers={
                    "Content-Type": "application/json",
                    "Authorization": f"Worker {token}",
                    "X-CSRFToken": csrf,
                    # A view that refuses before reading the body leaves it on a kept-alive
                    # connection; a connection per request keeps each answer its own.
                    "Connection": "close",
                },
                allow_redirects=False,
                timeout=120,
            )
            answers[(route, method, path)] = answer.status_code
            bodies[(route, method, path)] = answer.text[:200]

    server_errors = {key: status for key, status in answers.items() if status >= 500}
    assert not server_errors, server_errors
    refused_by_the_parser = {
        key for key, body in bodies.items() if answers[key] == 400 and TOO_DEEP["detail"] in body
    }
    # The views the issue named, each reached with its credentials and refused by the parser.
    slug = world.campaign.slug
    for route, method in [
        ("annotation:preview-join", "POST"),
        ("annotation:preview-submit", "POST"),
        ("annotation_api:campaign-join", "POST"),
        ("annotation_api:worker-assignment-submit", "POST"),
        ("annotation_api:worker-erase", "POST"),
        ("annotation_api:campaign-list", "POST"),
        ("annotation_api:campaign-detail", "PATCH"),
        ("webhooks_api:endpoints", "POST"),
        ("export_api:releases", "POST"),
        ("training_bridge_api:score", "POST"),
    ]:
        matching = [key for key in refused_by_the_parser if key[:2] == (route, method)]
        assert matching, f"{method} {route}: {[(k, answers[k]) for k in answers if k[0] == route]}"
    assert len(refused_by_the_parser) >= 20, sorted(refused_by_the_parser)
    assert Campaign.objects.filter(slug=slug).exists()
    _assert_no_server_error(live)


def test_the_preview_answers_a_deep_body_with_the_parsers_400(live, curator):
    """The probe's exact requests: no session, the preview token the page hands its script."""
    campaign = Campaign.objects.create(slug="deep-preview", name="Deep preview")
    token = preview_token_issue(campaign=campaign, user=curator)
    base = f"{live.url}/dashboard/campaigns/{campaign.slug}/preview"
    headers = {"Content-Type": "application/json"}

    joined = requests.post(f"{base}/join", data=NESTED, headers=headers, timeout=60)
    submitted = requests.post(
        f"{base}/assignments/1/submit",
        data=NESTED,
        headers={**headers, "Authorization": f"Worker {token}"},
        timeout=60,
    )

    assert (joined.status_code, submitted.status_code) == (400, 400)
    assert joined.json() == submitted.json() == TOO_DEEP
    assert re.fullmatch(r"application/json.*", joined.headers["Content-Type"])
    _assert_no_server_error(live)
