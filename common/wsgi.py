"""A WSGI application that serves some paths through a shorter middleware stack.

The worker API authenticates with a token in a header and never uses a session, a CSRF cookie, the
logged-in user or messages (its views are DRF views without session authentication, so DRF's own
CSRF check never applies either), yet every request paid for the session, CSRF, authentication
and messages middleware: about 0.1 ms of CPU per request, measured in-process through
Django's WSGI handler (bench/crowd_hot_path.py). `PathSplitApplication` sends the requests whose
path matches `pattern` to a second Django handler built without those middleware, and everything
else to the usual one. The security headers (SecurityMiddleware, the Content-Security-Policy,
X-Frame-Options), the Host check and Content-Length (CommonMiddleware), WhiteNoise and the 503 on
a lost database stay on both;
tests/common/test_wsgi.py checks that both stacks give the worker API the same answers.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

_loading = threading.Lock()


class ReducedMiddlewareHandler(WSGIHandler):
    """Django's WSGI handler with the middleware of `settings.MIDDLEWARE` minus `skipped`."""

    def __init__(self, *, skipped: Iterable[str]) -> None:
        self.skipped = frozenset(skipped)
        unknown = self.skipped - set(settings.MIDDLEWARE)
        if unknown:
            raise ValueError(f"not in settings.MIDDLEWARE: {sorted(unknown)}")
        super().__init__()

    def load_middleware(self, is_async: bool = False) -> None:
        # Django reads the list from settings; it is swapped for the time of the load only
        # (at start-up, before any request is served).
        with _loading:
            full = settings.MIDDLEWARE
            settings.MIDDLEWARE = [path for path in full if path not in self.skipped]
            try:
                super().load_middleware(is_async)
            finally:
                settings.MIDDLEWARE = full


class PathSplitApplication:
    """`reduced` for the paths `pattern` matches (from the start of PATH_INFO), else `full`."""

    def __init__(
        self, *, full: Callable[..., Any], reduced: Callable[..., Any], pattern: str
    ) -> None:
        self.full = full
        self.reduced = reduced
        self.pattern = re.compile(pattern)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if self.pattern.match(environ.get("PATH_INFO", "")):
            return self.reduced(environ, start_response)
        return self.full(environ, start_response)
