from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from common.permissions import is_curator


def roles(request: HttpRequest) -> dict[str, Any]:
    return {"user_is_curator": is_curator(getattr(request, "user", None))}
