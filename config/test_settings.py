"""Settings for the test suite: the production settings module, pointed at the local PostgreSQL
and Redis unless the environment says otherwise. Nothing here is a secret: the key is random per
run and exported so that the Celery worker processes the tests start share it."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from config.env import load_dotenv_file

# A developer's .env (e.g. a DATABASE_URL of their own) wins over the defaults below.
load_dotenv_file(str(Path(__file__).resolve().parent.parent / ".env"))

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lepus")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
# Under `pytest -n N` (pytest-xdist) each test process gets its own database (pytest-django adds
# `_gw0`, `_gw1`, ...) and here its own Redis database as broker, so one process's Celery worker
# never takes, and one process's purge never drops, another's tasks. The Celery workers a test
# starts inherit the shifted URL (the marker stops them shifting it again).
_xdist_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _xdist_worker.startswith("gw") and not os.environ.get("LEPUS_XDIST_BROKER"):
    _head, _, _db = os.environ["CELERY_BROKER_URL"].rpartition("/")
    if _db.isdigit():
        _shifted = (int(_db) + 1 + int(_xdist_worker[2:])) % 16
        os.environ["CELERY_BROKER_URL"] = f"{_head}/{_shifted}"
    os.environ["LEPUS_XDIST_BROKER"] = _xdist_worker
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(64))
os.environ.setdefault("LEPUS_VAR_DIR", f"/tmp/lepus-test-var-{os.getpid()}")
os.environ.setdefault("DJANGO_SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("DJANGO_SECURE_COOKIES", "false")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,testserver")
# One code version for the test process and the workers it starts (`git describe --dirty` would
# differ between them if the checkout changed during the run, and release files name it).
os.environ.setdefault("LEPUS_CODE_VERSION", "lepus-test-suite")
# The suite's workers have readable made-up ids ("worker-a"); tests/hardening/
# test_crowd_integrity.py runs with the production check on.
os.environ.setdefault("LEPUS_CHECK_WORKER_IDS", "false")
# Webhook targets resolve offline (IP literals and localhost only), here and in the servers and
# workers the tests start: a fuzzed or mistyped host name never becomes a DNS query.
os.environ.setdefault("LEPUS_WEBHOOK_RESOLVE", "offline")

from config import settings as _base  # noqa: E402
from config.settings import *  # noqa: E402,F403

# The suite's throttling is exercised explicitly by tests that lower the rates.
REST_FRAMEWORK = {
    **_base.REST_FRAMEWORK,
    "DEFAULT_THROTTLE_RATES": {
        **dict(_base.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]),  # type: ignore[call-overload]
        "join": "100000/min",
        "next": "100000/min",
        "submit": "100000/min",
        "me": "100000/min",
        "score": "100000/min",
    },
}
# Likewise the login lockout (many tests post wrong passwords from 127.0.0.1); the integrity
# tests lower these.
LEPUS_LOGIN_MAX_FAILURES = 100000
LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS = 100000
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
