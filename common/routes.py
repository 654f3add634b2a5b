"""Views declare their own route: `@route("campaigns/<slug:slug>/audit", name="audit-list")` above
the view (outermost, so the wrapped view is the one mounted), and a wing's `urls.py` lists its view
modules: `urlpatterns = patterns(campaigns, preview)`.

The pattern stands once, beside the code that answers it, instead of in a second table that repeats
every view's name. A URL conf's patterns come out module by module in the order given, and within a
module in the order the views are defined; no two patterns of one URL conf match the same path
(`tests/common/test_routes.py` resolves every route's own sample path back to its name), so the order
does not decide which view answers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from django.urls import URLPattern, path
from django.views.decorators.http import require_http_methods

from common.permissions import curator_required

View = TypeVar("View", bound=Callable[..., Any])

# module name -> its routes in definition order (decorators run as the module is imported)
_ROUTES: dict[str, list[tuple[str, Callable[..., Any], str]]] = {}


def route(pattern: str, *, name: str) -> Callable[[View], View]:
    """Mount the decorated view (a function, or an APIView class mounted `as_view()`) at `pattern`."""

    # The module that calls route() declares the route: a view made by a factory elsewhere
    # (quality.api.base.campaign_run_apis) belongs to the module that mounts it.
    return _mounter(sys._getframe(1).f_globals["__name__"], pattern, name)


def curator_page(
    pattern: str, *, name: str, methods: tuple[str, ...] = ("GET",)
) -> Callable[[View], View]:
    """A dashboard page: mounted at `pattern`, answering only `methods` (405 otherwise) and only to
    curators (`common.permissions.curator_required`: a stranger goes to the login page, a user
    without the role gets 403). Every curator page states these three facts; declared together,
    none of them can be left out of a new page."""

    mount = _mounter(sys._getframe(1).f_globals["__name__"], pattern, name)

    def declare(view: View) -> View:
        return mount(require_http_methods(list(methods))(curator_required(view)))  # type: ignore[return-value]

    return declare


def _mounter(module: str, pattern: str, name: str) -> Callable[[View], View]:
    def register(view: View) -> View:
        _ROUTES.setdefault(module, []).append((pattern, view, name))
        return view

    return register


def patterns(*modules: ModuleType) -> list[URLPattern]:
    """The URL patterns the given view modules declare, module by module in the order given."""
    return [
        path(pattern, view.as_view() if isinstance(view, type) else view, name=name)  # type: ignore[attr-defined]
        for module in modules
        for pattern, view, name in _ROUTES.get(module.__name__, [])
    ]
