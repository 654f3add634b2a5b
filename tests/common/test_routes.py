"""The routes views declare (common.routes): every mounted pattern answers its own paths, whatever
order the modules list them in, and a route belongs to the module that declares it."""

from __future__ import annotations

import re
import types
import typing

from django.urls import URLPattern, URLResolver, get_resolver, resolve

from common import routes

# A value per path converter that no route spells literally: a route whose own path is answered
# by another one (a `<slug:slug>/` listed before a literal `new/` would take it) is caught.
SAMPLES = {"int": "7", "slug": "s-lug", "str": "x", "path": "a/b"}


def _mounted(patterns: list, prefix: str = "", namespace: str = "") -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            found += _mounted(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            found.append((prefix + str(pattern.pattern), namespace + pattern.name))
    return found


def test_every_named_route_resolves_its_own_sample_paths_to_itself() -> None:
    mounted = [
        (route, name)
        for route, name in _mounted(get_resolver().url_patterns)
        if not route.startswith("^") and "(?P" not in route and not name.startswith("admin:")
    ]
    assert len(mounted) > 100
    mismatches = []
    for route, name in mounted:
        url = "/" + re.sub(r"<(?:(\w+):)?\w+>", lambda m: SAMPLES[m.group(1) or "str"], route)
        answered = resolve(url)
        if answered.route != route:
            mismatches.append((url, name, answered.view_name))
    assert mismatches == []


def test_a_route_belongs_to_the_module_that_declares_it_in_definition_order() -> None:
    module = types.ModuleType("tests.common.routes_probe")

    def first() -> None: ...

    def second() -> None: ...

    # route() is called from the probe module's own code, as a decorator line in a view module is
    exec(
        "route('b/', name='second')(second)\nroute('a/', name='first')(first)",
        {"__name__": module.__name__, "route": routes.route, "first": first, "second": second},
    )
    mounted = routes.patterns(module)
    assert [(str(pattern.pattern), pattern.name) for pattern in mounted] == [
        ("b/", "second"),
        ("a/", "first"),
    ]
    assert mounted[0].callback is second


def test_a_curator_page_answers_its_methods_to_curators_alone(rf, curator, outsider) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.auth.models import AnonymousUser
    from django.core.exceptions import PermissionDenied
    from django.http import HttpResponse

    module = types.ModuleType("tests.common.curator_page_probe")
    calls: list[str] = []

    def page(request):  # type: ignore[no-untyped-def]
        calls.append(request.method)
        return HttpResponse("ok")

    namespace: dict[str, typing.Any] = {
        "__name__": module.__name__,
        "curator_page": routes.curator_page,
        "page": page,
    }
    exec("mounted = curator_page('p/', name='probe', methods=('POST',))(page)", namespace)
    view = namespace["mounted"]
    assert [(str(p.pattern), p.name) for p in routes.patterns(module)] == [("p/", "probe")]

    def answer(method: str, user):  # type: ignore[no-untyped-def]
        request = getattr(rf, method.lower())("/p/")
        request.user = user
        return view(request)

    assert answer("POST", curator).status_code == 200
    assert answer("GET", curator).status_code == 405
    assert answer("POST", AnonymousUser()).status_code == 302  # to the login page
    try:
        answer("POST", outsider)
    except PermissionDenied:
        pass
    else:
        raise AssertionError("a user without the curator role reached the page")
    assert calls == ["POST"]
