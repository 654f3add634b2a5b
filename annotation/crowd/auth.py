"""Worker authentication for the worker API: `Authorization: Worker <token>`.

Workers are not Django users: `request.user` stays anonymous and `request.auth` is the worker's
`Participation` (with its campaign and worker loaded in the same query), so curator-only views
stay closed to them and worker views read everything they need from `request.auth`.

A token answers 401 when it is unknown or expired (`LEPUS_WORKER_TOKEN_TTL` after the worker was
last active), and 403 with the campaign's screen-out (`screen_out_payload`: code, redirect or the
MTurk return instruction) when the worker was excluded: no view of the worker API runs for an
excluded worker again; see `annotation.crowd.services.workers`.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from annotation.crowd.services.screen_out import ScreenOut, screen_out_payload
from annotation.crowd.services.workers import participation_by_token, worker_token_problem
from annotation.models import Participation, ParticipationStatus

KEYWORD = "Worker"


class ScreenedOut(exceptions.APIException):
    """The worker was excluded by quality control: 403 with the screen-out payload as body."""

    status_code = 403
    default_code = "screened_out"

    def __init__(self, payload: ScreenOut) -> None:
        super().__init__()
        # Rendered as is (DRF keeps a dict detail as the body); its stubs type a detail's values.
        self.detail = cast("dict[str, Any]", payload)


class WorkerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[AnonymousUser, Participation] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != KEYWORD.lower():
            return None
        token = token.strip()
        if not token or " " in token:
            raise exceptions.AuthenticationFailed("Malformed worker token header.")
        participation = participation_by_token(token=token)
        if participation is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked worker token.")
        # A view may take an excluded worker's (revoked) token: only erasing oneself does.
        view = (request.parser_context or {}).get("view")
        revoked_ok = bool(getattr(view, "accepts_revoked_worker_tokens", False))
        if participation.status == ParticipationStatus.EXCLUDED and not revoked_ok:
            raise ScreenedOut(screen_out_payload(participation=participation))
        problem = worker_token_problem(participation=participation, revoked_ok=revoked_ok)
        if problem is not None:
            raise exceptions.AuthenticationFailed(problem)
        return AnonymousUser(), participation

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) to requests without a valid token.
        return KEYWORD


class IsWorker(BasePermission):
    message = "A worker token is required (Authorization: Worker <token>)."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Participation)


class WorkerTokenScheme(OpenApiAuthenticationExtension):
    """Documents the worker token in the OpenAPI schema."""

    target_class = "annotation.crowd.auth.WorkerTokenAuthentication"
    name = "workerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Worker <token>`, the worker_token returned by "
            "POST /api/v1/campaigns/{slug}/join.",
        }
