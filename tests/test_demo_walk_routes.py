"""The demo walk (`scripts/demo_walk.py`, run by `make demo-smoke`) has a place for every page a
curator or a worker can open: every GET route of the permission matrix that answers a curator or
a worker with an HTML page is in the walk's `WALKED_ROUTES` or, with its reason, in `NOT_WALKED`.
A new page therefore fails here until the walk opens it, as a new route fails the matrix until it
has a row there."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from django.test import Client
from django.urls import resolve

from tests.hardening.test_permission_matrix import ROUTES
from tests.hardening.world import build_world

pytestmark = pytest.mark.django_db

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "demo_walk.py"
# Worker pages are opened with the demo's Prolific parameters; the API, Django's admin and media
# are no pages.
SKIP_PREFIXES = ("/api/", "/admin/", "/media/")
READERS = ("curator", "worker_a")


def _walk_module() -> ModuleType:
    """The script as a module, without running it (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("demo_walk", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("demo_walk", module)
    spec.loader.exec_module(module)
    return module


def _html_pages(world) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """{route: path} of every GET route the matrix opens to a curator or a worker that answers
    one of them (a curator's session, or no session as a worker's browser has) with HTML."""
    curator = Client()
    curator.force_login(world.curator)
    clients = {"curator": curator, "worker_a": Client()}
    pages = {}
    for route, cases in ROUTES.items():
        for case in cases:
            if case.method != "GET":
                continue
            path = case.path(world)
            if path.startswith(SKIP_PREFIXES):
                continue
            for reader in READERS:
                if case.expect.get(reader) != 200:
                    continue
                answer = clients[reader].get(path)
                if answer.status_code == 200 and answer["Content-Type"].startswith("text/html"):
                    pages[route] = path
    return pages


def test_every_page_a_curator_or_worker_can_open_has_a_place_in_the_demo_walk(
    curator, admin_user, outsider
):
    walk = _walk_module()
    world = build_world(curator=curator, admin=admin_user, outsider=outsider)

    pages = _html_pages(world)

    # The filter finds the dashboard's and the worker's pages (a broken one would pass with none).
    assert {"annotation:campaign-list", "export:list", "worker:entry"} <= set(pages)
    placed = set(walk.WALKED_ROUTES) | set(walk.NOT_WALKED)
    missing = sorted(set(pages) - placed)
    assert not missing, "pages without a place in scripts/demo_walk.py: " + ", ".join(
        f"{route} ({pages[route]})" for route in missing
    )
    assert not set(walk.WALKED_ROUTES) & set(walk.NOT_WALKED)
    assert all(reason.strip() for reason in walk.NOT_WALKED.values())
    # Nothing is listed that is no route (renamed or removed). Some pages the walk opens are not
    # here: the matrix's world has no evaluation or webhook endpoint for a curator to open.
    stale = sorted(placed - set(ROUTES))
    assert not stale, f"listed in the walk but no route: {', '.join(stale)}"


def test_each_path_the_walk_opens_resolves_to_the_route_it_names():
    walk = _walk_module()
    wrong = []
    for route, template in walk.WALKED_ROUTES.items():
        path = re.sub(r"\{id\}", "7", template.replace("{campaign}", "demo"))
        found = resolve(path).view_name
        if found != route:
            wrong.append(f"{template} is {found}, not {route}")
    assert not wrong, "\n".join(wrong)
