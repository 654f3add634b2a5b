"""Middleware: a lost database connection becomes a clean 503 instead of a 500 page with a
traceback; every response carries a Content-Security-Policy."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        logger.warning(
            "database unavailable during %s %s: %s", request.method, request.path, exception
        )
        message = "The service is temporarily unavailable. Please retry in a moment."
        if request.path.startswith("/api/"):
            response: HttpResponse = JsonResponse({"detail": message}, status=503)
        else:
            response = HttpResponse(message, status=503, content_type="text/plain")
        response["Retry-After"] = "5"
        return response


class ContentSecurityPolicyMiddleware:
    """Adds `settings.CONTENT_SECURITY_POLICY` to every response that has no policy of its own
    (the rating page sets a wider one for MTurk's frame). With DEBUG on, Django's technical error
    pages (inline style and script) are left without one."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" in response:
            return response
        if settings.DEBUG and response.status_code >= 400:
            return response
        response["Content-Security-Policy"] = settings.CONTENT_SECURITY_POLICY
        return response
