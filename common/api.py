"""DRF glue: an exception handler that answers a lost database with 503 and never leaks a
traceback."""

from __future__ import annotations

import logging
from typing import Any

from django.db import InterfaceError, OperationalError
from rest_framework import status
from rest_framework.response import Response
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
