"""Counters that hold under concurrency, for the API throttles and the curator login lockout.

`counter_hit` counts one event in a window that starts at the first event and lasts `window`
seconds. On Redis (production: `REDIS_URL`) it is one round trip running one Lua script,
`SET key 0 PX window NX; INCR key; PTTL key`, so concurrent requests on any number of web
processes each get a distinct count: of 300 simultaneous requests against a limit of 60, exactly
60 see a count ≤ 60. (DRF's own throttle reads its history, appends and writes it back; under
concurrency those read-modify-writes overwrite each other and let several times the limit
through.) Other caches use `add` + `incr`, atomic within the local-memory cache of one process;
the database cache is not atomic: deployments with several web processes use Redis.

Login lockout (`LoginLockoutBackend`, `LoginView`): failed curator logins are counted per username
and per client address; after `LEPUS_LOGIN_MAX_FAILURES` failures of one username (or
`LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS` from one address) within `LEPUS_LOGIN_LOCKOUT_SECONDS`,
every login of that username (address) is refused — the right password included — for
`LEPUS_LOGIN_LOCKOUT_SECONDS`. The lockout fails closed: when the cache cannot be reached no one
can log in (sessions already open keep working), because a lockout that disappears with Redis is
exactly what a password-guesser would wait for.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from redis.exceptions import NoScriptError
from rest_framework.throttling import BaseThrottle

from common.cache import redis_writer

logger = logging.getLogger(__name__)


# One script, so one command and one round trip: atomic like the MULTI/EXEC pipeline it replaces
# (SET NX PX; INCR; PTTL, repairing a key without expiry), with a third of the commands for Redis
# to parse and redis-py to pack and read back.
_COUNTER_SCRIPT = """
redis.call('SET', KEYS[1], 0, 'PX', ARGV[1], 'NX')
local count = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    ttl = tonumber(ARGV[1])
end
return {count, ttl}
"""
_COUNTER_SCRIPT_SHA = hashlib.sha1(_COUNTER_SCRIPT.encode()).hexdigest()


def counter_hit(key: str, window: float) -> tuple[int, float]:
    """Count one event under `key`: (events in the current window including this one, seconds
    until the window ends). Raises when the cache is unreachable (callers choose fail-open or
    fail-closed)."""
    window_ms = max(1, int(window * 1000))
    redis = redis_writer(key)
    if redis is not None:
        client, redis_key = redis
        try:
            count, ttl_ms = client.evalsha(_COUNTER_SCRIPT_SHA, 1, redis_key, window_ms)
        except NoScriptError:  # first use on this server (or after SCRIPT FLUSH / a restart)
            count, ttl_ms = client.eval(_COUNTER_SCRIPT, 1, redis_key, window_ms)
        return int(count), int(ttl_ms) / 1000.0
    started_key = f"{key}:started"
    for _attempt in range(3):
        now = time.time()
        cache.add(started_key, now, timeout=window)
        cache.add(key, 0, timeout=window)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr
            continue
        started = cache.get(started_key) or now
        return int(count), max(0.0, window - (now - float(started)))
    raise RuntimeError(f"rate-limit counter {key!r} kept expiring")


def counter_value(key: str) -> int:
    value = cache.get(key)
    return int(value) if value is not None else 0


# --- curator login lockout ---------------------------------------------------------------------


def _client_address(request: HttpRequest | None) -> str | None:
    if request is None:
        return None
    # DRF's rule (LEPUS_NUM_PROXIES): never trust a client-sent X-Forwarded-For as it is.
    return str(BaseThrottle().get_ident(request))  # type: ignore[arg-type]


def _lock_keys(username: str, address: str | None) -> list[tuple[str, int]]:
    """(key prefix, failure limit) for the username and the address of a login attempt."""
    name = hashlib.sha256(username.strip().casefold().encode("utf-8")).hexdigest()[:32]
    keys = [(f"login:user:{name}", settings.LEPUS_LOGIN_MAX_FAILURES)]
    if address:
        keys.append((f"login:addr:{address}", settings.LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS))
    return keys


class LoginLocked(PermissionDenied):
    pass


class LoginLockoutBackend(ModelBackend):
    """Django's model backend behind a lockout (see the module docstring). Raising
    PermissionDenied stops `authenticate()` for every backend, the admin's login included."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if username is None:
            username = kwargs.get(self._username_field(), "")
        username = username or ""
        keys = _lock_keys(username, _client_address(request))
        try:
            locked = cache.get_many([f"{prefix}:locked" for prefix, _limit in keys])
        except Exception as error:
            logger.warning("login lockout store unavailable, refusing the login: %s", error)
            _flag(request, "unavailable")
            raise LoginLocked("lockout store unavailable")
        if locked:
            _flag(request, "locked")
            raise LoginLocked("too many failed logins")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        try:
            if user is None:
                self._failure(keys)
            else:
                cache.delete(f"{keys[0][0]}:failures")
        except Exception as error:
            logger.warning("login lockout store unavailable, refusing the login: %s", error)
            _flag(request, "unavailable")
            raise LoginLocked("lockout store unavailable")
        return user

    def _username_field(self) -> str:
        from django.contrib.auth import get_user_model

        return str(get_user_model().USERNAME_FIELD)

    def _failure(self, keys: list[tuple[str, int]]) -> None:
        seconds = settings.LEPUS_LOGIN_LOCKOUT_SECONDS
        for prefix, limit in keys:
            failures, _left = counter_hit(f"{prefix}:failures", seconds)
            if failures >= limit:
                cache.set(f"{prefix}:locked", 1, timeout=seconds)
                logger.warning("login locked for %s after %d failures", prefix, failures)


def _flag(request: HttpRequest | None, reason: str) -> None:
    if request is not None:
        request.lepus_login_refused = reason  # type: ignore[attr-defined]


class LoginView(auth_views.LoginView):
    """Django's login page; a locked-out attempt answers 429 (503 while the lockout store is
    unreachable) with a message saying so instead of "wrong password"."""

    def form_invalid(self, form: Any) -> HttpResponse:
        reason = getattr(self.request, "lepus_login_refused", None)
        if reason is None:
            return super().form_invalid(form)
        minutes = math.ceil(settings.LEPUS_LOGIN_LOCKOUT_SECONDS / 60)
        message = (
            f"Too many failed log-in attempts. Try again in {minutes} minutes."
            if reason == "locked"
            else "Logging in is temporarily unavailable. Please try again in a moment."
        )
        context = self.get_context_data(form=form, refusal=message)
        return self.render_to_response(context, status=429 if reason == "locked" else 503)
