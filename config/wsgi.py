"""WSGI entry point for gunicorn: `gunicorn config.wsgi`.

The worker API (token in a header, no session, no CSRF cookie) runs through a shorter middleware
stack: see common/wsgi.py.
"""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

site = get_wsgi_application()

from common.wsgi import PathSplitApplication, ReducedMiddlewareHandler  # noqa: E402 (after setup)

# The worker API's paths (annotation/crowd/api_urls.py): join, and everything under worker/.
WORKER_API_PATHS = r"/api/v1/(?:worker/|campaigns/[^/]+/join$)"
# What those requests never use: sessions, the logged-in user, messages, CSRF cookies (their views
# take a worker token, not a session). CommonMiddleware stays: it checks the Host header against
# ALLOWED_HOSTS and sets Content-Length.
WORKER_API_SKIPPED_MIDDLEWARE = (
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
)

application = PathSplitApplication(
    full=site,
    reduced=ReducedMiddlewareHandler(skipped=WORKER_API_SKIPPED_MIDDLEWARE),
    pattern=WORKER_API_PATHS,
)
