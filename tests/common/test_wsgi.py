"""The worker API's shorter middleware stack (common/wsgi.py, config/wsgi.py): only the worker
API's paths take it, and through it the worker API answers exactly as through Django's full
stack — status, headers (security headers included) and body — for success and for refusals."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections

from annotation.models import Participation, ParticipationStatus
from common.wsgi import ReducedMiddlewareHandler
from config import wsgi as config_wsgi
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _keep_the_test_transaction() -> Iterator[None]:
    """As Django's test client does: a request must not close the test's database connection."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def call(
    app: Any, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[str, dict[str, str], bytes]:
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "HTTP_HOST": "testserver",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_LENGTH": str(len(data)),
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(data),
        **{
            f"HTTP_{key.upper().replace('-', '_')}": value for key, value in (headers or {}).items()
        },
    }
    setup_testing_defaults(environ)  # the rest of a WSGI environ
    answer: dict[str, Any] = {}

    def start_response(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None):  # type: ignore[no-untyped-def]
        answer["status"] = status
        answer["headers"] = dict(response_headers)

    result = app(environ, start_response)
    try:
        content = b"".join(result)
    finally:
        result.close()
    return answer["status"], answer["headers"], content


def test_only_the_worker_api_paths_take_the_shorter_stack():
    pattern = config_wsgi.application.pattern
    for path in (
        "/api/v1/worker/assignments/next",
        "/api/v1/worker/assignments/17/submit",
        "/api/v1/worker/me",
        "/api/v1/worker/erase",
        "/api/v1/campaigns/pilot/join",
    ):
        assert pattern.match(path), path
    for path in (
        "/api/v1/campaigns/",
        "/api/v1/campaigns/pilot/",
        "/api/v1/campaigns/pilot/invites",
        "/api/v1/campaigns/pilot/join/extra",
        "/w/pilot",
        "/dashboard/",
        "/accounts/login/",
        "/admin/",
        "/xapi/v1/worker/me",
    ):
        assert not pattern.match(path), path
    reduced = config_wsgi.application.reduced
    assert isinstance(reduced, ReducedMiddlewareHandler)
    assert reduced.skipped == frozenset(config_wsgi.WORKER_API_SKIPPED_MIDDLEWARE)


def test_a_middleware_that_is_not_configured_cannot_be_skipped():
    with pytest.raises(ValueError, match=r"not in settings\.MIDDLEWARE"):
        ReducedMiddlewareHandler(skipped=["common.middleware.NoSuchMiddleware"])


def _same(reduced: tuple[str, dict[str, str], bytes], full: tuple[str, dict[str, str], bytes]):  # type: ignore[no-untyped-def]
    assert reduced[0] == full[0]
    assert reduced[1] == full[1]
    return reduced


def test_the_worker_api_answers_the_same_through_both_stacks(settings):
    settings.LEPUS_CHECK_WORKER_IDS = False
    campaign = crowd_campaign(slug="stacks", clips=4)
    campaign.status = "active"
    campaign.save(update_fields=["status"])
    reduced, full = config_wsgi.application, WSGIHandler()
    # The worker page sends no cookie (its token lives in sessionStorage); see the last test for
    # a request that carries one anyway.
    cookie: dict[str, str] = {}

    # Join: one worker through each stack (same answer shape: a token).
    tokens = []
    for index, app in enumerate((reduced, full)):
        status, headers, body = call(
            app,
            "POST",
            "/api/v1/campaigns/stacks/join",
            {"platform": "prolific", "external_id": f"stack-worker-{index}"},
            cookie,
        )
        assert status.startswith("200"), body
        tokens.append(json.loads(body)["worker_token"])
        assert "Set-Cookie" not in headers
    assert (
        call(reduced, "POST", "/api/v1/campaigns/stacks/join", {"platform": "prolific"})[1]
        == call(full, "POST", "/api/v1/campaigns/stacks/join", {"platform": "prolific"})[1]
    )

    # Refusals: no token, a bad token, a body that is not JSON, an unknown assignment.
    for method, path, body, headers in (
        ("POST", "/api/v1/worker/assignments/next", None, {}),
        ("POST", "/api/v1/worker/assignments/next", None, {"Authorization": "Worker nope"}),
        ("GET", "/api/v1/worker/me", None, {"Authorization": "Worker nope"}),
        ("POST", "/api/v1/worker/assignments/999999/submit", b"{", {}),
    ):
        first = call(reduced, method, path, body, {**headers, **cookie})
        second = call(full, method, path, body, {**headers, **cookie})
        _same(first, second)
        assert first[2] == second[2]
        assert first[1]["Content-Security-Policy"] and first[1]["X-Frame-Options"] == "DENY"
        assert first[1]["Content-Length"] == str(len(first[2]))
    auth = {"Authorization": f"Worker {tokens[0]}", **cookie}
    unknown = call(
        reduced, "POST", "/api/v1/worker/assignments/999999/submit", {"ratings": []}, auth
    )
    assert unknown[0].startswith("404")
    assert (
        unknown[2]
        == call(full, "POST", "/api/v1/worker/assignments/999999/submit", {"ratings": []}, auth)[2]
    )

    # The whole cycle, one worker per stack: same statuses, same headers.
    offers = []
    for token, app in zip(tokens, (reduced, full), strict=True):
        offers.append(
            call(
                app,
                "POST",
                "/api/v1/worker/assignments/next",
                None,
                {"Authorization": f"Worker {token}", **cookie},
            )
        )
    _same(*offers)
    submitted = []
    for token, app, offer in zip(tokens, (reduced, full), offers, strict=True):
        payload = json.loads(offer[2])
        submitted.append(
            call(
                app,
                "POST",
                f"/api/v1/worker/assignments/{payload['assignment_id']}/submit",
                {"ratings": all_candidate_ratings(payload)},
                {"Authorization": f"Worker {token}", **cookie},
            )
        )
    assert _same(*submitted)[0].startswith("201")
    me = [
        call(app, "GET", "/api/v1/worker/me", None, {"Authorization": f"Worker {token}"})
        for token, app in zip(tokens, (reduced, full), strict=True)
    ]
    _same(*me)
    assert json.loads(me[0][2])["assignments_done"] == json.loads(me[1][2])["assignments_done"] == 1

    # A screened-out worker gets the same 403 screen-out either way.
    Participation.objects.update(status=ParticipationStatus.EXCLUDED)
    excluded = [
        call(
            app,
            "POST",
            "/api/v1/worker/assignments/next",
            None,
            {"Authorization": f"Worker {token}"},
        )
        for token, app in zip(tokens, (reduced, full), strict=True)
    ]
    _same(*excluded)
    assert excluded[0][0].startswith("403") and excluded[0][2] == excluded[1][2]


def test_other_paths_keep_the_full_stack(client, curator):
    # A curator's session works through config.wsgi exactly as through Django's handler.
    client.force_login(curator)
    session = client.cookies["sessionid"].value
    headers = {"Cookie": f"sessionid={session}"}
    through_config = call(config_wsgi.application, "GET", "/api/v1/campaigns/", None, headers)
    through_django = call(WSGIHandler(), "GET", "/api/v1/campaigns/", None, headers)
    assert through_config[0].startswith("200")
    assert through_config[0] == through_django[0] and through_config[2] == through_django[2]
    assert through_config[1] == through_django[1]
    assert "Cookie" in through_config[1].get("Vary", "")  # the session middleware ran


def test_a_session_cookie_sent_to_the_worker_api_changes_nothing_but_an_unknown_path_s_404():
    """A request that carries a session cookie gets the same answer from the worker API's views
    through both stacks (they never touch the session). The one difference, on purpose: Django's
    404 for an unknown path under /api/v1/worker/ looked at the session in the full stack and
    deleted an unknown session cookie; the shorter stack leaves the cookie alone."""
    cookie = {"Cookie": "sessionid=unknown-session"}
    path = "/api/v1/worker/assignments/next"
    through_config = call(config_wsgi.application, "POST", path, None, cookie)
    through_django = call(WSGIHandler(), "POST", path, None, cookie)
    assert through_config[0] == through_django[0] == "401 Unauthorized"
    assert through_config[1] == through_django[1] and through_config[2] == through_django[2]

    unknown = "/api/v1/worker/no-such-thing"
    through_config = call(config_wsgi.application, "GET", unknown, None, cookie)
    through_django = call(WSGIHandler(), "GET", unknown, None, cookie)
    assert through_config[0] == through_django[0] == "404 Not Found"
    assert through_config[2] == through_django[2] == b'{"detail": "Not found."}'
    assert "Set-Cookie" not in through_config[1]


def test_a_host_outside_allowed_hosts_is_refused_by_both_stacks():
    path = "/api/v1/worker/assignments/next"
    headers = {"Host": "evil.example"}
    through_config = call(config_wsgi.application, "POST", path, None, headers)
    through_django = call(WSGIHandler(), "POST", path, None, headers)
    assert through_config[0] == through_django[0] == "400 Bad Request"
