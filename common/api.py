"""DRF glue: an exception handler that answers a lost database with 503 and never leaks a
traceback; throttles counted atomically (`common.ratelimit`) that let requests through when their
cache (Redis) is down; JSON 404/500
answers under /api/; and the schema class that declares the error answers every API view can give,
so the published OpenAPI schema lists each status a client can receive
(tests/hardening/test_schema_fuzz.py holds the server to it)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle, SimpleRateThrottle
from rest_framework.views import exception_handler as drf_exception_handler

from common.ratelimit import counter_hit

logger = logging.getLogger(__name__)

UNAVAILABLE_MESSAGE = "The service is temporarily unavailable. Please retry in a moment."


def exception_handler(exception: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exception, (OperationalError, InterfaceError)):
        logger.warning("database unavailable: %s", exception)
        response = Response(
            {"detail": UNAVAILABLE_MESSAGE}, status=status.HTTP_503_SERVICE_UNAVAILABLE
        )
        response["Retry-After"] = "5"
        return response
    return drf_exception_handler(exception, context)


class RememberedContentNegotiation(DefaultContentNegotiation):
    """DRF's content negotiation, remembering its answer per `Accept` header.

    DRF parses the `Accept` header and each renderer's media type, and builds the query string's
    QueryDict (for `?format=`), on every request, while the worker API's clients send one of a
    handful of headers. Without a format suffix and without a query string the answer depends only
    on the renderer classes and the header, so it is remembered: up to `max_remembered` headers of
    at most `max_remembered_chars` per process (a client sending ever new headers fills that once
    and is answered by DRF from then on). Everything else, and every refusal (406), goes through
    DRF as before."""

    max_remembered = 256
    max_remembered_chars = 200
    _remembered: dict[tuple[tuple[type, ...], str], tuple[int, str]] = {}

    def select_renderer(
        self,
        request: Request,
        renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        renderers = list(renderers)
        if format_suffix or request.META.get("QUERY_STRING"):
            return super().select_renderer(request, renderers, format_suffix)  # type: ignore[no-any-return]
        accept = request.META.get("HTTP_ACCEPT", "*/*")
        key = (tuple(type(renderer) for renderer in renderers), accept)
        known = self._remembered.get(key)
        if known is not None:
            return renderers[known[0]], known[1]
        renderer, media_type = super().select_renderer(request, renderers, format_suffix)
        if len(accept) <= self.max_remembered_chars and len(self._remembered) < self.max_remembered:
            self._remembered[key] = (renderers.index(renderer), media_type)
        return renderer, media_type


class AtomicRateThrottle(SimpleRateThrottle):
    """DRF's rate throttle counted with an atomic counter (`common.ratelimit.counter_hit`):
    the limit holds under any number of concurrent requests on any number of web processes.
    The window starts with the first request of a client and lasts the rate's period."""

    cache_format = "throttle:%(scope)s:%(ident)s"
    # Set by SimpleRateThrottle.__init__ from the rate (not declared by the stubs).
    num_requests: int
    duration: int

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        count, self._seconds_left = counter_hit(self.key, self.duration)
        return count <= self.num_requests

    def wait(self) -> float | None:
        return max(1.0, getattr(self, "_seconds_left", float(self.duration)))


class AtomicScopedRateThrottle(ScopedRateThrottle, AtomicRateThrottle):
    """`throttle_scope` on the view picks the rate, counted atomically."""


class FailOpenThrottleMixin:
    """Throttle state lives in the cache (Redis in production). When the cache cannot be reached
    the request is let through (logged): losing the rate limit for a while is better than
    answering 500 to every worker, and the web path must not depend on Redis."""

    def allow_request(self, request: Request, view: Any) -> bool:
        try:
            return bool(super().allow_request(request, view))  # type: ignore[misc]
        except Exception as error:  # redis ConnectionError, TimeoutError, ...
            logger.warning("throttle cache unavailable, letting the request through: %s", error)
            return True


class FailOpenSimpleRateThrottle(FailOpenThrottleMixin, AtomicRateThrottle):
    pass


class FailOpenScopedRateThrottle(FailOpenThrottleMixin, AtomicScopedRateThrottle):
    pass


# --- Django's own error pages, in JSON under /api/ ---------------------------------------------


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A path that matches no URL pattern (e.g. `/api/v1/releases/abc/`) is a JSON 404 under /api/,
    like the 404s the API views give, and Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"detail": "Server error."}, status=500)
    return defaults.server_error(request)


# --- OpenAPI ----------------------------------------------------------------------------------


def validated(
    serializer: type[serializers.Serializer], request: Request, *, partial: bool = False
) -> Mapping[str, Any]:
    """The request body checked by `serializer` (a 400 with the field errors otherwise)."""
    data = serializer(data=request.data, partial=partial)
    data.is_valid(raise_exception=True)
    return data.validated_data


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class FieldErrorsSerializer(serializers.Serializer):
    """{"<path of the field>": ["message", ...]}, e.g. {"ratings[0].relevance": [...]}."""

    non_field_errors = serializers.ListField(child=serializers.CharField(), required=False)


_PATH_PARAMETER = re.compile(r"{\w+}")


class LepusAutoSchema(AutoSchema):
    """Adds to each operation the answers DRF and Django give before or around the view's own code,
    unless the view declares them itself:

    - 400 and 415 when the operation reads a JSON body (malformed JSON, field errors; another
      media type);
    - 401 when an authentication class answers with a challenge (the worker token), else 403 for
      views behind a permission (no or wrong session, no curator role, CSRF);
    - 404 when the path has parameters (no such object, or a value the URL pattern refuses);
    - 429 when the view is throttled;
    - 503 everywhere (the database is unreachable: `exception_handler` and
      `common.middleware.DatabaseUnavailableMiddleware`).
    """

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for code, (serializer, description) in self._implicit_errors().items():
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(serializer, description=description), code, direction=direction
                )
        return responses

    def _implicit_errors(self) -> dict[str, tuple[type[serializers.Serializer], str]]:
        errors: dict[str, tuple[type[serializers.Serializer], str]] = {}
        if self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None:
            errors["400"] = (FieldErrorsSerializer, "Invalid body: errors by field.")
            errors["415"] = (ErrorSerializer, "The body is not application/json.")
        permissions = self.view.get_permissions()
        if not all(isinstance(permission, AllowAny) for permission in permissions):
            authenticators = self.view.get_authenticators()
            if any(
                authenticator.authenticate_header(self.view.request)
                for authenticator in authenticators
            ):
                errors["401"] = (ErrorSerializer, "Missing or invalid credentials.")
            if any(
                isinstance(authenticator, SessionAuthentication) for authenticator in authenticators
            ):
                errors["403"] = (
                    ErrorSerializer,
                    "Not logged in, not allowed (curators only) or CSRF check failed.",
                )
        if _PATH_PARAMETER.search(self.path):
            errors["404"] = (ErrorSerializer, "No such object.")
        if self.view.get_throttles():
            errors["429"] = (ErrorSerializer, "Throttled; see Retry-After.")
        errors["503"] = (ErrorSerializer, "Database unreachable; see Retry-After.")
        return errors
