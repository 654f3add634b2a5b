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

View = TypeVar("View", bound=Callable[..., Any])

# module name -> its routes in definition order (decorators run as the module is imported)
_ROUTES: dict[str, list[tuple[str, Callable[..., Any], str]]] = {}


def route(pattern: str, *, name: str) -> Callable[[View], View]:
    """Mount the decorated view (a function, or an APIView class mounted `as_view()`) at `pattern`."""

    # The module that calls route() declares the route: a view made by a factory elsewhere
    # (quality.api.base.campaign_run_apis) belongs to the module that mounts it.
    module = sys._getframe(1).f_globals["__name__"]

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
