"""Roles: curators (group `curator`, or superusers) run campaigns; workers never have passwords and
authenticate with a worker token (see `annotation.crowd.auth`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

CURATOR_GROUP = "curator"


def is_curator(user: Any) -> bool:
    if (
        user is None
        or isinstance(user, AnonymousUser)
        or not getattr(user, "is_authenticated", False)
    ):
        return False
    if not getattr(user, "is_active", False):
        return False
    if getattr(user, "is_superuser", False):
        return True
    cached = getattr(user, "_lepus_is_curator", None)
    if cached is None:
        cached = user.groups.filter(name=CURATOR_GROUP).exists()
        user._lepus_is_curator = cached
    return bool(cached)


class IsCurator(BasePermission):
    """Default for every API view: only curators (and admins)."""

    message = "Curator role required."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_curator(request.user)


def curator_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Dashboard pages: a stranger is sent to the login page, a user without the role gets 403."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not is_curator(request.user):
            raise PermissionDenied("Curator role required.")
        return view(request, *args, **kwargs)

    return wrapper
