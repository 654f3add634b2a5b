"""The permission matrix: every route of the URL configuration, every HTTP method it answers, and
what each member of the cast gets — anonymous, an outsider (logged in, no role), crowd workers A
and B (token header, no session), a curator and an admin.

The table below is checked against `get_resolver()`: a route without a row (or a row without a
route) fails `test_every_route_has_a_row`, naming it. Django's admin is one group (its index and two
changelists); its permissions are Django's own (`is_staff`).

Outcomes: an HTTP status, or LOGIN (302 to the login page). Every request runs in a savepoint that
is rolled back, so each member of the cast meets the same world. For curators and admins the
methods a route has no row for must answer 405, so a new method on an old route also needs a row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse

from annotation.models import Assignment, AssignmentStatus, Judgment, Participation
from common import storage
from tests.annotation.crowd_factories import all_candidate_ratings
from tests.hardening.world import (
    MEDIA_KEY,
    ROLES,
    World,
    build_world,
    role_client,
    submit_url,
    worker_client,
)

pytestmark = pytest.mark.django_db

LOGIN = "login"  # 302 to /accounts/login/?next=...
ADMIN_LOGIN = "admin-login"  # 302 to /admin/login/?next=...
ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
PathFor = Callable[[World], str]


@dataclass(frozen=True)
class Case:
    method: str
    path: PathFor
    expect: dict[str, int | str]
    body: Callable[[World], Any] | None = None
    json: bool = True  # body as JSON (API) or as a form (pages)
    note: str = ""


def slug(world: World) -> dict[str, Any]:
    return {"slug": world.campaign.slug}


def url(name: str, kwargs: Callable[[World], dict[str, Any]] | None = None) -> PathFor:
    return lambda world: reverse(name, kwargs=kwargs(world) if kwargs else None)


def _everyone(outcome: int | str) -> dict[str, int | str]:
    return dict.fromkeys(ROLES, outcome)


def curator_page(ok: int | str = 200, admin: int | str | None = None) -> dict[str, int | str]:
    """A dashboard page: strangers and workers (who have no session) go to the login page,
    a logged-in user without the curator role is refused."""
    return {
        "anonymous": LOGIN,
        "outsider": 403,
        "worker_a": LOGIN,
        "worker_b": LOGIN,
        "curator": ok,
        "admin": ok if admin is None else admin,
    }


def curator_api(ok: int, admin: int | None = None) -> dict[str, int | str]:
    """A curator API: session authentication; no session (or a worker token) is 403."""
    return {
        "anonymous": 403,
        "outsider": 403,
        "worker_a": 403,
        "worker_b": 403,
        "curator": ok,
        "admin": ok if admin is None else admin,
    }


def logged_in_page(ok: int | str) -> dict[str, int | str]:
    return {
        "anonymous": LOGIN,
        "outsider": ok,
        "worker_a": LOGIN,
        "worker_b": LOGIN,
        "curator": ok,
        "admin": ok,
    }


def worker_api(a: int, b: int) -> dict[str, int | str]:
    """A worker API: only a worker token counts; a session (curator or not) is 401."""
    return {
        "anonymous": 401,
        "outsider": 401,
        "worker_a": a,
        "worker_b": b,
        "curator": 401,
        "admin": 401,
    }


def admin_only() -> dict[str, int | str]:
    return {**_everyone(ADMIN_LOGIN), "admin": 200}


def media_path(world: World, *, key: str = MEDIA_KEY, expires: int | None = None,
               signature: str | None = None, sign_key: str | None = None) -> str:  # fmt: skip
    expires = int(time.time()) + 60 if expires is None else expires
    if signature is None:
        signature = storage._local_signature(sign_key or key, expires)
    return f"/media/s/{key}?{urlencode({'e': expires, 's': signature})}"


def _ratings(offer: dict[str, Any]) -> dict[str, Any]:
    return {"ratings": all_candidate_ratings(offer, value=3)}


# --- the table ----------------------------------------------------------------------------------

C = Case
ROUTES: dict[str, list[Case]] = {
    # Public entry points.
    "home": [C("GET", url("home"), _everyone(302), note="redirects to /dashboard/")],
    "healthz": [C("GET", url("healthz"), _everyone(200))],
    "favicon": [C("GET", url("favicon"), _everyone(302), note="to the static icon")],
    "api-schema": [C("GET", url("api-schema"), _everyone(200), note="the public contract")],
    "login": [
        C("GET", url("login"), _everyone(200)),
        C(
            "POST",
            url("login"),
            _everyone(200),
            lambda w: {"username": "x", "password": "y"},
            json=False,
            note="wrong credentials: the form again",
        ),
    ],
    "logout": [C("POST", url("logout"), _everyone(302), json=False)],
    "password_change": [
        C("GET", url("password_change"), logged_in_page(200)),
        C("POST", url("password_change"), logged_in_page(200), lambda w: {}, json=False),
    ],
    "password_change_done": [C("GET", url("password_change_done"), logged_in_page(200))],
    # Signed media: the signature is the capability, whoever holds the URL.
    "signed-media": [
        C("GET", media_path, _everyone(200), note="valid signature"),
        C("GET", lambda w: f"/media/s/{MEDIA_KEY}", _everyone(403), note="unsigned"),
        C(
            "GET",
            lambda w: media_path(w, expires=int(time.time()) - 1),
            _everyone(403),
            note="expired",
        ),
        C("GET", lambda w: media_path(w, signature="0" * 64), _everyone(403), note="forged"),
        C(
            "GET",
            lambda w: media_path(
                w,
                expires=int(time.time()) + 3600,
                signature=storage._local_signature(MEDIA_KEY, 60),
            ),
            _everyone(403),
            note="expiry moved after signing",
        ),
        C(
            "GET",
            lambda w: media_path(w, sign_key="clips/other.mp4"),
            _everyone(403),
            note="signature of another key",
        ),
    ],
    # Crowd entry: the rating page and the worker API.
    "worker:entry": [
        C(
            "GET",
            lambda w: reverse("worker:entry", kwargs=slug(w)) + "?PROLIFIC_PID=p1",
            _everyone(200),
        ),
    ],
    "annotation_api:campaign-join": [
        C(
            "POST",
            url("annotation_api:campaign-join", slug),
            _everyone(200),
            lambda w: {"platform": "prolific", "external_id": "newcomer"},
        ),
    ],
    "annotation_api:worker-assignment-next": [
        C("POST", url("annotation_api:worker-assignment-next"), worker_api(200, 200)),
    ],
    "annotation_api:worker-assignment-submit": [
        C(
            "POST",
            lambda w: submit_url(w.live_a.pk),
            worker_api(201, 404),
            lambda w: _ratings(w.offer_a),
            note="A's live assignment",
        ),
        C(
            "POST",
            lambda w: submit_url(w.live_b.pk),
            worker_api(404, 201),
            lambda w: _ratings(w.offer_b),
            note="B's live assignment",
        ),
        C(
            "POST",
            lambda w: submit_url(w.submitted_a.pk),
            worker_api(409, 404),
            lambda w: _ratings(w.offer_submitted_a),
            note="A's submitted assignment, other ratings",
        ),
    ],
    "annotation_api:worker-me": [C("GET", url("annotation_api:worker-me"), worker_api(200, 200))],
    # Erasure: a worker erases only themselves (the token names the person).
    "worker:erase": [C("GET", url("worker:erase", slug), _everyone(200))],
    "annotation_api:worker-erase": [
        C(
            "POST",
            url("annotation_api:worker-erase"),
            worker_api(200, 200),
            lambda w: {"confirm": True},
        ),
        C(
            "POST",
            url("annotation_api:worker-erase"),
            worker_api(400, 400),
            lambda w: {"confirm": False},
            note="not confirmed",
        ),
    ],
    "annotation_api:quality-worker-erase": [
        C(
            "POST",
            url(
                "annotation_api:quality-worker-erase",
                lambda w: {**slug(w), "participation_id": w.participation_b.pk},
            ),
            curator_api(200),
            lambda w: {"confirm": True},
        ),
    ],
    # Curator API: campaigns.
    "annotation_api:campaign-list": [
        C("GET", url("annotation_api:campaign-list"), curator_api(200)),
        C("POST", url("annotation_api:campaign-list"), curator_api(400), lambda w: {}),
    ],
    "annotation_api:campaign-detail": [
        C("GET", url("annotation_api:campaign-detail", slug), curator_api(200)),
        C(
            "PATCH",
            url("annotation_api:campaign-detail", slug),
            curator_api(200),
            lambda w: {"description": "patched"},
        ),
        C(
            "DELETE",
            url("annotation_api:campaign-detail", slug),
            curator_api(409),
            note="a campaign with crowd judgments is not deleted",
        ),
    ],
    "annotation_api:campaign-invite-create": [
        C(
            "POST",
            url("annotation_api:campaign-invite-create", slug),
            curator_api(201),
            lambda w: {"invitee": "carol@lab"},
        ),
    ],
    "annotation_api:campaign-payments": [
        C("GET", url("annotation_api:campaign-payments", slug), curator_api(200)),
    ],
    # Curator API: quality control (other workers' data lives here).
    "annotation_api:quality-summary": [
        C("GET", url("annotation_api:quality-summary", slug), curator_api(200)),
    ],
    "annotation_api:quality-workers": [
        C("GET", url("annotation_api:quality-workers", slug), curator_api(200)),
    ],
    "annotation_api:quality-worker-exclude": [
        C(
            "POST",
            url(
                "annotation_api:quality-worker-exclude",
                lambda w: {**slug(w), "participation_id": w.participation_b.pk},
            ),
            curator_api(200),
            lambda w: {"note": "spam"},
        ),
    ],
    "annotation_api:quality-worker-include": [
        C(
            "POST",
            url(
                "annotation_api:quality-worker-include",
                lambda w: {**slug(w), "participation_id": w.participation_b.pk},
            ),
            curator_api(200),
            lambda w: {},
            note="B is not excluded: a no-op",
        ),
    ],
    "annotation_api:qc-runs": [
        C("GET", url("annotation_api:qc-runs", slug), curator_api(200)),
        C("POST", url("annotation_api:qc-runs", slug), curator_api(202)),
    ],
    "annotation_api:qc-run-detail": [
        C(
            "GET",
            url("annotation_api:qc-run-detail", lambda w: {**slug(w), "run_id": w.qc_run.pk}),
            curator_api(200),
        ),
    ],
    "annotation_api:agreement": [C("GET", url("annotation_api:agreement", slug), curator_api(200))],
    "annotation_api:quality-retest": [
        C("GET", url("annotation_api:quality-retest", slug), curator_api(200)),
    ],
    "annotation_api:calibration": [
        C("GET", url("annotation_api:calibration", slug), curator_api(200)),
    ],
    "annotation_api:calibration-runs": [
        C("GET", url("annotation_api:calibration-runs", slug), curator_api(200)),
        C("POST", url("annotation_api:calibration-runs", slug), curator_api(202)),
    ],
    "annotation_api:calibration-run-detail": [
        C(
            "GET",
            url(
                "annotation_api:calibration-run-detail",
                lambda w: {**slug(w), "run_id": w.calibration_run.pk},
            ),
            curator_api(200),
        ),
    ],
    "annotation_api:review-queue": [
        C("GET", url("annotation_api:review-queue", slug), curator_api(200)),
    ],
    "annotation_api:review-claim-next": [
        C("POST", url("annotation_api:review-claim-next", slug), curator_api(200)),
    ],
    "annotation_api:review-detail": [
        C(
            "GET",
            url("annotation_api:review-detail", lambda w: {**slug(w), "item_id": w.review_item.pk}),
            curator_api(200),
        ),
    ],
    "annotation_api:review-claim": [
        C(
            "POST",
            url("annotation_api:review-claim", lambda w: {**slug(w), "item_id": w.review_item.pk}),
            curator_api(200),
        ),
    ],
    "annotation_api:review-release": [
        C(
            "POST",
            url(
                "annotation_api:review-release", lambda w: {**slug(w), "item_id": w.review_item.pk}
            ),
            curator_api(409),
            note="nobody holds the item",
        ),
    ],
    "annotation_api:review-resolve": [
        C(
            "POST",
            url(
                "annotation_api:review-resolve", lambda w: {**slug(w), "item_id": w.review_item.pk}
            ),
            curator_api(400),
            lambda w: {"ratings": "bad"},
        ),
    ],
    "annotation_api:audit-list": [
        C("GET", url("annotation_api:audit-list", slug), curator_api(200))
    ],
    "annotation_api:audit-undo": [
        C(
            "POST",
            url("annotation_api:audit-undo", lambda w: {**slug(w), "entry_id": w.audit_entry.pk}),
            curator_api(200),
            lambda w: {},
        ),
    ],
    "annotation_api:aggregates": [
        C("GET", url("annotation_api:aggregates", slug), curator_api(200))
    ],
    "annotation_api:leaderboard": [
        C("GET", url("annotation_api:leaderboard", slug), curator_api(200)),
    ],
    "annotation_api:controls": [
        C("POST", url("annotation_api:controls", slug), curator_api(400), lambda w: {}),
    ],
    # Curator API: releases and training.
    # Curator API: uploads of the import page (multipart).
    "annotation_api:import-list": [
        C("GET", url("annotation_api:import-list"), curator_api(200)),
        C(
            "POST",
            url("annotation_api:import-list"),
            curator_api(400),
            lambda w: {},
            json=False,
            note="multipart without a kind or file",
        ),
    ],
    "annotation_api:import-detail": [
        C(
            "GET",
            url("annotation_api:import-detail", lambda w: {"job_id": w.import_upload.pk}),
            curator_api(200),
        ),
    ],
    "export_api:releases": [
        C("GET", url("export_api:releases"), curator_api(200)),
        C("POST", url("export_api:releases"), curator_api(400), lambda w: {}),
    ],
    "export_api:release": [
        C(
            "GET",
            url("export_api:release", lambda w: {"release_id": w.release.pk}),
            curator_api(200),
        ),
    ],
    "export_api:compare": [
        C(
            "GET",
            url(
                "export_api:compare",
                lambda w: {"release_id": w.release.pk, "other_id": w.other_release.pk},
            ),
            curator_api(200),
        ),
    ],
    "export_api:rerun": [
        C(
            "POST",
            url("export_api:rerun", lambda w: {"release_id": w.release.pk}),
            curator_api(409),
            note="only failed or cancelled releases are re-run",
        ),
    ],
    "export_api:cancel": [
        C(
            "POST",
            url("export_api:cancel", lambda w: {"release_id": w.release.pk}),
            curator_api(409),
            note="a finished release is not cancelled",
        ),
    ],
    # Curator API: webhooks (ids that do not exist: the role check comes before the lookup).
    "webhooks_api:endpoints": [
        C("GET", url("webhooks_api:endpoints"), curator_api(200)),
        C("POST", url("webhooks_api:endpoints"), curator_api(400), lambda w: {}),
    ],
    "webhooks_api:endpoint": [
        C("GET", url("webhooks_api:endpoint", lambda w: {"endpoint_id": 999999}), curator_api(404)),
        C(
            "DELETE",
            url("webhooks_api:endpoint", lambda w: {"endpoint_id": 999999}),
            curator_api(404),
        ),
    ],
    "webhooks_api:rotate": [
        C("POST", url("webhooks_api:rotate", lambda w: {"endpoint_id": 999999}), curator_api(404)),
    ],
    "webhooks_api:deliveries": [
        C(
            "GET",
            url("webhooks_api:deliveries", lambda w: {"endpoint_id": 999999}),
            curator_api(404),
        ),
    ],
    "webhooks_api:redeliver": [
        C(
            "POST",
            url("webhooks_api:redeliver", lambda w: {"delivery_id": 999999}),
            curator_api(404),
        ),
    ],
    "training_bridge_api:metrics-leaderboard": [
        C("GET", url("training_bridge_api:metrics-leaderboard"), curator_api(200)),
    ],
    "training_bridge_api:evaluation-list": [
        C("POST", url("training_bridge_api:evaluation-list"), curator_api(400), lambda w: {}),
    ],
    "training_bridge_api:evaluation-detail": [
        C(
            "GET",
            url("training_bridge_api:evaluation-detail", lambda w: {"evaluation_id": 999999}),
            curator_api(404),
        ),
    ],
    "training_bridge_api:run-list": [
        C("GET", url("training_bridge_api:run-list"), curator_api(200)),
        C("POST", url("training_bridge_api:run-list"), curator_api(400), lambda w: {}),
    ],
    "training_bridge_api:run-detail": [
        C(
            "GET",
            url("training_bridge_api:run-detail", lambda w: {"run_id": w.training_run.pk}),
            curator_api(200),
        ),
    ],
    "training_bridge_api:run-cancel": [
        C(
            "POST",
            url("training_bridge_api:run-cancel", lambda w: {"run_id": w.training_run.pk}),
            curator_api(200),
        ),
    ],
    "training_bridge_api:run-resume": [
        C(
            "POST",
            url("training_bridge_api:run-resume", lambda w: {"run_id": w.training_run.pk}),
            curator_api(409),
            note="a queued run is not resumed",
        ),
    ],
    "training_bridge_api:score": [
        C("POST", url("training_bridge_api:score"), curator_api(400), lambda w: {}),
    ],
    "training_bridge_api:score-detail": [
        C(
            "GET",
            url("training_bridge_api:score-detail", lambda w: {"request_id": w.score_request.pk}),
            curator_api(200),
        ),
    ],
    # Dashboard pages: campaigns.
    "annotation:campaign-list": [C("GET", url("annotation:campaign-list"), curator_page())],
    "annotation:campaign-list-csv": [C("GET", url("annotation:campaign-list-csv"), curator_page())],
    "annotation:campaign-create": [
        C("GET", url("annotation:campaign-create"), curator_page()),
        C(
            "POST",
            url("annotation:campaign-create"),
            curator_page(200),
            lambda w: {},
            json=False,
            note="an empty form: shown again with errors",
        ),
    ],
    "annotation:campaign-edit": [
        C("GET", url("annotation:campaign-edit", slug), curator_page()),
        C(
            "POST",
            url("annotation:campaign-edit", slug),
            curator_page(200),
            lambda w: {},
            json=False,
        ),
    ],
    "annotation:campaign-links": [
        C("GET", url("annotation:campaign-links", slug), curator_page()),
        C(
            "POST",
            url("annotation:campaign-links", slug),
            curator_page(200),
            lambda w: {"invitee": "dave@lab"},
            json=False,
        ),
    ],
    "annotation:campaign-payments-csv": [
        C("GET", url("annotation:campaign-payments-csv", slug), curator_page()),
    ],
    # Dashboard pages: quality control and review.
    "annotation:campaign-detail": [
        C("GET", url("annotation:campaign-detail", slug), curator_page())
    ],
    "annotation:quality-run": [
        C("POST", url("annotation:quality-run", slug), curator_page(302), json=False),
    ],
    "annotation:quality-workers": [
        C("GET", url("annotation:quality-workers", slug), curator_page())
    ],
    "annotation:quality-worker": [
        C(
            "GET",
            url(
                "annotation:quality-worker",
                lambda w: {**slug(w), "participation_id": w.participation_b.pk},
            ),
            curator_page(),
        )
    ],
    "annotation:quality-worker-exclude": [
        C(
            "POST",
            url(
                "annotation:quality-worker-exclude",
                lambda w: {**slug(w), "participation_id": w.participation_b.pk},
            ),
            curator_page(302),
            lambda w: {"note": "spam"},
            json=False,
        ),
    ],
    "annotation:quality-worker-erase": [
        C(
            "POST",
            url(
                "annotation:quality-worker-erase",
                lambda w: {**slug(w), "participation_id": w.participation_b.pk},
            ),
            curator_page(302),
            lambda w: {"confirm": "erase"},
            json=False,
        ),
    ],
    "annotation:quality-worker-include": [
        C(
            "POST",
            url(
                "annotation:quality-worker-include",
                lambda w: {**slug(w), "participation_id": w.participation_b.pk},
            ),
            curator_page(302),
            lambda w: {},
            json=False,
        ),
    ],
    "annotation:review-queue": [C("GET", url("annotation:review-queue", slug), curator_page())],
    "annotation:review-claim-next": [
        C("POST", url("annotation:review-claim-next", slug), curator_page(302), json=False),
    ],
    "annotation:review-item": [
        C(
            "GET",
            url("annotation:review-item", lambda w: {**slug(w), "item_id": w.review_item.pk}),
            curator_page(),
        ),
    ],
    "annotation:review-claim": [
        C(
            "POST",
            url("annotation:review-claim", lambda w: {**slug(w), "item_id": w.review_item.pk}),
            curator_page(302),
            json=False,
        ),
    ],
    "annotation:review-release": [
        C(
            "POST",
            url("annotation:review-release", lambda w: {**slug(w), "item_id": w.review_item.pk}),
            curator_page(302),
            json=False,
        ),
    ],
    "annotation:review-resolve": [
        C(
            "POST",
            url("annotation:review-resolve", lambda w: {**slug(w), "item_id": w.review_item.pk}),
            # Nothing to resolve: the form comes back (400) with the message, inputs kept.
            curator_page(400),
            lambda w: {},
            json=False,
        ),
    ],
    "annotation:audit-log": [C("GET", url("annotation:audit-log", slug), curator_page())],
    "annotation:audit-undo": [
        C(
            "POST",
            url("annotation:audit-undo", lambda w: {**slug(w), "entry_id": w.audit_entry.pk}),
            curator_page(302),
            lambda w: {},
            json=False,
        ),
    ],
    "annotation:leaderboard": [C("GET", url("annotation:leaderboard", slug), curator_page())],
    # Dashboard pages: data, releases, training.
    "annotation:data": [C("GET", url("annotation:data"), curator_page())],
    # The data browser: tables and detail pages (the worker's page is annotation:quality-worker).
    "annotation:browse-clips": [C("GET", url("annotation:browse-clips"), curator_page())],
    "annotation:browse-clip": [
        C(
            "GET",
            url(
                "annotation:browse-clip",
                lambda w: {"clip_id": w.review_item.campaign_candidate.clip_id},
            ),
            curator_page(),
        )
    ],
    "annotation:browse-candidates": [
        C("GET", url("annotation:browse-candidates"), curator_page()),
        C(
            "GET",
            lambda w: reverse("annotation:browse-candidates") + "?size=100000",
            curator_page(400),
            note="a page size over the limit",
        ),
    ],
    "annotation:browse-candidate": [
        C(
            "GET",
            url(
                "annotation:browse-candidate",
                lambda w: {"item_id": w.review_item.campaign_candidate_id},
            ),
            curator_page(),
        )
    ],
    "annotation:browse-judgments": [C("GET", url("annotation:browse-judgments"), curator_page())],
    "annotation:browse-workers": [C("GET", url("annotation:browse-workers"), curator_page())],
    # Preview as a worker: the page for curators; its endpoints take only the page's signed
    # token (a worker token, a session or nothing is 401; a join without a token 400).
    "annotation:preview": [C("GET", url("annotation:preview", slug), curator_page())],
    "annotation:preview-join": [
        C("POST", url("annotation:preview-join", slug), _everyone(400), lambda w: {}),
    ],
    "annotation:preview-next": [C("POST", url("annotation:preview-next", slug), _everyone(401))],
    "annotation:preview-submit": [
        C(
            "POST",
            url("annotation:preview-submit", lambda w: {**slug(w), "assignment_id": 1}),
            _everyone(401),
            lambda w: {"ratings": []},
        )
    ],
    "annotation:preview-me": [C("GET", url("annotation:preview-me", slug), _everyone(401))],
    "annotation:video-job-retry": [
        C(
            "POST",
            url("annotation:video-job-retry", lambda w: {"job_id": w.video_job.pk}),
            curator_page(302),
            json=False,
        ),
    ],
    "annotation:imports": [
        C("GET", url("annotation:imports"), curator_page()),
        C(
            "POST",
            url("annotation:imports"),
            curator_page(400),
            lambda w: {},
            json=False,
            note="an empty form: the page again with errors",
        ),
    ],
    "annotation:import-detail": [
        C(
            "GET",
            url("annotation:import-detail", lambda w: {"job_id": w.import_upload.pk}),
            curator_page(),
        ),
    ],
    "annotation:import-retry": [
        C(
            "POST",
            url("annotation:import-retry", lambda w: {"job_id": w.import_upload.pk}),
            curator_page(302),
            json=False,
        ),
    ],
    "export:list": [C("GET", url("export:list"), curator_page())],
    "export:download": [
        C(
            "GET",
            url("export:download", lambda w: {"release_id": w.release.pk}),
            curator_page(),
            note="the whole release as a streamed zip",
        ),
    ],
    "webhooks:list": [C("GET", url("webhooks:list"), curator_page())],
    "webhooks:create": [
        C(
            "POST",
            url("webhooks:create"),
            curator_page(400),
            lambda w: {},
            json=False,
            note="an empty form: the list again with errors",
        ),
    ],
    "webhooks:detail": [
        C("GET", url("webhooks:detail", lambda w: {"endpoint_id": 999999}), curator_page(404)),
    ],
    "webhooks:rotate": [
        C(
            "POST",
            url("webhooks:rotate", lambda w: {"endpoint_id": 999999}),
            curator_page(404),
            json=False,
        ),
    ],
    "webhooks:redeliver": [
        C(
            "POST",
            url("webhooks:redeliver", lambda w: {"delivery_id": 999999}),
            curator_page(404),
            json=False,
        ),
    ],
    # The demo's webhook receiver: off (404) unless LEPUS_DEMO_WEBHOOK_RECEIVER is set, as here;
    # tests/annotation/webhooks/test_webhook_demo_receiver.py covers it switched on.
    "webhooks:demo-receiver": [
        C("GET", url("webhooks:demo-receiver"), curator_page(404), note="off: 404"),
    ],
    "webhooks:demo-receiver-deliver": [
        C(
            "POST",
            url("webhooks:demo-receiver-deliver"),
            _everyone(404),
            lambda w: {},
            note="off: 404 to everyone (signed deliveries, no session, when on)",
        ),
    ],
    "export:create": [
        C(
            "POST",
            url("export:create"),
            curator_page(400),
            lambda w: {},
            json=False,
            note="an empty form: the list again with errors",
        ),
    ],
    "export:detail": [
        C("GET", url("export:detail", lambda w: {"release_id": w.release.pk}), curator_page()),
    ],
    "export:compare": [
        C(
            "GET",
            url(
                "export:compare",
                lambda w: {"release_id": w.release.pk, "other_id": w.other_release.pk},
            ),
            curator_page(),
        ),
    ],
    "export:rerun": [
        C(
            "POST",
            url("export:rerun", lambda w: {"release_id": w.release.pk}),
            curator_page(302),
            json=False,
        ),
    ],
    "export:cancel": [
        C(
            "POST",
            url("export:cancel", lambda w: {"release_id": w.release.pk}),
            curator_page(302),
            json=False,
        ),
    ],
    "training_bridge:run-list": [C("GET", url("training_bridge:run-list"), curator_page())],
    "training_bridge:run-start": [
        C(
            "POST",
            url("training_bridge:run-start"),
            curator_page(302),
            lambda w: {"release": w.release.pk},
            json=False,
        ),
    ],
    "training_bridge:run-compare": [C("GET", url("training_bridge:run-compare"), curator_page())],
    "training_bridge:metrics-leaderboard": [
        C("GET", url("training_bridge:metrics-leaderboard"), curator_page())
    ],
    "training_bridge:evaluation-start": [
        C(
            "POST",
            url("training_bridge:evaluation-start"),
            curator_page(302),
            lambda w: {"run": w.training_run.pk},
            json=False,
            note="no benchmark campaign chosen: back to the run with the error",
        ),
    ],
    "training_bridge:evaluation-detail": [
        C(
            "GET",
            url("training_bridge:evaluation-detail", lambda w: {"evaluation_id": 999999}),
            curator_page(404),
        ),
    ],
    "training_bridge:run-detail": [
        C(
            "GET",
            url("training_bridge:run-detail", lambda w: {"run_id": w.training_run.pk}),
            curator_page(),
        ),
    ],
    "training_bridge:run-cancel": [
        C(
            "POST",
            url("training_bridge:run-cancel", lambda w: {"run_id": w.training_run.pk}),
            curator_page(302),
            json=False,
        ),
    ],
    "training_bridge:run-resume": [
        C(
            "POST",
            url("training_bridge:run-resume", lambda w: {"run_id": w.training_run.pk}),
            curator_page(302),
            json=False,
        ),
    ],
}

# Django's admin, as one group: its own permission model (staff only).
ADMIN_CASES = [
    C("GET", url("admin:index"), admin_only()),
    C("GET", url("admin:annotation_judgment_changelist"), admin_only()),
    C("GET", url("admin:annotation_participation_changelist"), admin_only()),
]
# Routes that answer every method the same way, so the 405 check does not apply.
ANY_METHOD = {
    "home": "RedirectView redirects every method",
    "healthz": "a plain liveness probe",
    # Django's own form views treat PUT like POST; they are Django's, not ours.
    "login": "django.contrib.auth",
    "password_change": "django.contrib.auth",
}


# --- running a case -----------------------------------------------------------------------------


def _route_names() -> dict[str, str]:
    """{namespaced route name: pattern} of every route outside the admin."""
    found: dict[str, str] = {}

    def walk(patterns: list[Any], prefix: str, namespaces: tuple[str, ...]) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                namespace = (pattern.namespace,) if pattern.namespace else ()
                walk(pattern.url_patterns, prefix + str(pattern.pattern), namespaces + namespace)
            elif isinstance(pattern, URLPattern):
                if namespaces[:1] == ("admin",):
                    continue
                name = ":".join(
                    (*namespaces, pattern.name or f"<unnamed {prefix}{pattern.pattern}>")
                )
                found[name] = prefix + str(pattern.pattern)

    walk(get_resolver().url_patterns, "/", ())
    return found


def _request(client: Client, case: Case, world: World, path: str) -> Any:
    method = getattr(client, case.method.lower())
    if case.body is None:
        return method(path)
    if case.json:
        return method(path, case.body(world), content_type="application/json")
    if case.method == "POST":
        return method(path, case.body(world))
    return method(
        path, urlencode(case.body(world)), content_type="application/x-www-form-urlencoded"
    )


def _outcome(response: Any) -> int | str:
    if response.status_code == 302:
        location = response["Location"]
        if location.startswith("/accounts/login/?next="):
            return LOGIN
        if location.startswith("/admin/login/?next="):
            return ADMIN_LOGIN
    return response.status_code


def _isolated(call: Callable[[], Any]) -> Any:
    """Run one request in a savepoint and roll it back: every role meets the same world."""
    with transaction.atomic():
        result = call()
        transaction.set_rollback(True)
    return result


@pytest.fixture
def world(curator, admin_user, outsider) -> World:  # type: ignore[no-untyped-def]
    return build_world(curator=curator, admin=admin_user, outsider=outsider)


# --- the tests ----------------------------------------------------------------------------------


def test_every_route_has_a_row():
    routes = _route_names()
    missing = sorted(set(routes) - set(ROUTES))
    stale = sorted(set(ROUTES) - set(routes))
    assert not missing, "routes without a row in the permission matrix: " + ", ".join(
        f"{name} ({routes[name]})" for name in missing
    )
    assert not stale, f"rows for routes that no longer exist: {', '.join(stale)}"


def test_every_route_answers_each_role_as_the_table_says(world):
    """One world for the whole table (building it is the slow part); each request is rolled
    back, and all mismatches are reported together, each naming its route."""
    mismatches = []
    for route, cases in ROUTES.items():
        for case in cases:
            assert set(case.expect) == set(ROLES), f"{route}: every role needs an outcome"
            path = case.path(world)
            assert resolve(path.split("?")[0]).view_name == route, f"{path} is not {route}"
            for role in ROLES:
                client = role_client(world, role)
                got = _isolated(lambda: _outcome(_request(client, case, world, path)))  # noqa: B023
                if got != case.expect[role]:
                    mismatches.append(
                        f"{route}: {case.method} {path} [{case.note}] as {role}: "
                        f"{got}, expected {case.expect[role]}"
                    )
    assert not mismatches, "\n".join(mismatches)


def _allowed_roles(cases: list[Case]) -> list[str]:
    """The roles a route serves (a 2xx or 3xx outcome other than a login redirect)."""
    return [
        role
        for role in ROLES
        if any(isinstance(case.expect[role], int) and case.expect[role] < 400 for case in cases)
    ]


def test_methods_without_a_row_are_405(world):
    """For the roles a route serves: any method the table has no row for is refused with 405."""
    wrong = []
    for route, cases in ROUTES.items():
        if route in ANY_METHOD:
            continue
        path = cases[0].path(world)
        for method in sorted(set(ALL_METHODS) - {case.method for case in cases}):
            for role in _allowed_roles(cases):
                client = role_client(world, role)
                code = _isolated(lambda: getattr(client, method.lower())(path).status_code)  # noqa: B023
                if code != 405:
                    wrong.append(f"{route}: {method} {path} as {role}: {code}")
    assert not wrong, "methods answered without a row in the matrix:\n" + "\n".join(wrong)


def test_django_admin_is_for_staff_only(world):
    mismatches = []
    for case in ADMIN_CASES:
        path = case.path(world)
        for role in ROLES:
            got = _outcome(role_client(world, role).get(path))
            if got != case.expect[role]:
                mismatches.append(f"{path} {role}: {got} != {case.expect[role]}")
    assert not mismatches, "\n".join(mismatches)


# --- worker A and worker B ----------------------------------------------------------------------


def _state(world: World) -> dict[str, Any]:
    return {
        "judgments": sorted(
            Judgment.objects.values_list("participation_id", "campaign_candidate_id", "values")
        ),
        "assignments": sorted(Assignment.objects.values_list("pk", "participation_id", "status")),
        "submitted": sorted(
            Participation.objects.values_list("pk", "assignments_submitted", "active_ms_total")
        ),
    }


def test_each_worker_sees_only_their_own_progress_and_assignment(world):
    client_a, client_b = worker_client(world.token_a), worker_client(world.token_b)

    me_a = client_a.get("/api/v1/worker/me").json()
    me_b = client_b.get("/api/v1/worker/me").json()
    next_a = client_a.post("/api/v1/worker/assignments/next").json()
    next_b = client_b.post("/api/v1/worker/assignments/next").json()

    assert (me_a["assignments_done"], me_a["live_assignment_id"]) == (1, world.live_a.pk)
    assert (me_b["assignments_done"], me_b["live_assignment_id"]) == (0, world.live_b.pk)
    assert (next_a["assignment_id"], next_b["assignment_id"]) == (world.live_a.pk, world.live_b.pk)
    assert {c["id"] for c in next_a["candidates"]}.isdisjoint(c["id"] for c in next_b["candidates"])
    # Nothing in a worker's answers names the other worker or their assignment.
    for body in (me_a, next_a):
        assert "worker-b" not in json.dumps(body)
        assert world.live_b.pk not in (body.get("assignment_id"), body.get("live_assignment_id"))


def test_worker_a_cannot_submit_or_resubmit_worker_bs_assignments(world):
    client_a = worker_client(world.token_a)
    before = _state(world)
    unknown = Assignment.objects.order_by("-pk").first().pk + 1000

    answers = [
        client_a.post(submit_url(assignment_id), _ratings(offer), content_type="application/json")
        for assignment_id, offer in (
            (world.live_b.pk, world.offer_b),
            (unknown, world.offer_b),
        )
    ]

    assert [(a.status_code, a.json()) for a in answers] == [
        (404, {"detail": "No such assignment."}),
        (404, {"detail": "No such assignment."}),
    ]
    assert _state(world) == before
    assert Assignment.objects.get(pk=world.live_b.pk).status == AssignmentStatus.LIVE


def test_a_token_of_another_campaign_does_not_reach_this_campaigns_assignments(world):
    from tests.annotation.crowd_factories import crowd_campaign, crowd_join

    other = crowd_campaign(clips=1, candidates_per_clip=1, slug="elsewhere")
    token, _participation = crowd_join(other, "worker-a")  # the same person, another campaign
    before = _state(world)

    response = worker_client(token).post(
        submit_url(world.live_a.pk), _ratings(world.offer_a), content_type="application/json"
    )

    assert (response.status_code, response.json()) == (404, {"detail": "No such assignment."})
    assert _state(world) == before
