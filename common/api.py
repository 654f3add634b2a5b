"""DRF glue: an exception handler that answers a lost database with 503 and never leaks a
traceback, and throttles that let requests through when their cache (Redis) is down."""

from __future__ import annotations

import logging
from typing import Any

from django.db import InterfaceError, OperationalError
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle, SimpleRateThrottle
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)


def exception_handler(exception: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exception, (OperationalError, InterfaceError)):
        logger.warning("database unavailable: %s", exception)
        response = Response(
            {"detail": "The service is temporarily unavailable. Please retry in a moment."},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
        response["Retry-After"] = "5"
        return response
    return drf_exception_handler(exception, context)


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


class FailOpenSimpleRateThrottle(FailOpenThrottleMixin, SimpleRateThrottle):
    pass


class FailOpenScopedRateThrottle(FailOpenThrottleMixin, ScopedRateThrottle):
    pass
