"""Counters that hold under concurrency, for the API throttles and the curator login lockout.

`counter_hit` counts one event in a window that starts at the first event and lasts `window`
seconds. On Redis (production: `REDIS_URL`) it is one round trip running one Lua script,
`SET key 0 PX window NX; INCR key; PTTL key`, so concurrent requests on any number of web
processes each get a distinct count: of 300 simultaneous requests against a limit of 60, exactly
60 see a count ≤ 60. (DRF's own throttle reads its history, appends and writes it back; under
concurrency those read-modify-writes overwrite each other and let several times the limit
through.) Other caches use `add` + `incr`, atomic within the local-memory cache of one process;
the database cache is not atomic: deployments with several web processes use Redis.

Login lockout (`LoginLockoutBackend`, `LoginView`), built so that nobody can lock the owner out:

- after `LEPUS_LOGIN_MAX_FAILURES` failures of one username from one client address within
  `LEPUS_LOGIN_LOCKOUT_SECONDS`, that (username, address) pair is refused — the right password
  included — for `LEPUS_LOGIN_LOCKOUT_SECONDS`; the same username from another address is not;
- after `LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS` failures from one address (any usernames), that
  address is refused likewise;
- a per-username slow-down against guessing from many addresses: once a username has
  `LEPUS_LOGIN_SLOWDOWN_AFTER` failures (all addresses together) in the window, an address that
  has already failed it must wait after the username's last failure (1 s, doubling per failure, at
  most `LEPUS_LOGIN_SLOWDOWN_MAX_SECONDS`); an address that has not failed it is never held back,
  so the owner's right password from their own address always gets through.

A refused attempt is not checked and not counted. A right password clears only its own pair's
count. The lockout fails closed: when the cache cannot be reached no one can log in (sessions
already open keep working), because a lockout that disappears with Redis is exactly what a
password-guesser would wait for.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, NoReturn

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.throttling import BaseThrottle

from common.cache import Script, redis_writer

logger = logging.getLogger(__name__)


# One script, so one command and one round trip: atomic like the MULTI/EXEC pipeline it replaces
# (SET NX PX; INCR; PTTL, repairing a key without expiry), with a third of the commands for Redis
# to parse and redis-py to pack and read back.
_COUNTER_SCRIPT = Script("""
redis.call('SET', KEYS[1], 0, 'PX', ARGV[1], 'NX')
local count = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    ttl = tonumber(ARGV[1])
end
return {count, ttl}
""")


def counter_hit(key: str, window: float) -> tuple[int, float]:
    """Count one event under `key`: (events in the current window including this one, seconds
    until the window ends). Raises when the cache is unreachable (callers choose fail-open or
    fail-closed)."""
    window_ms = max(1, int(window * 1000))
    redis = redis_writer(key)
    if redis is not None:
        client, redis_key = redis
        count, ttl_ms = _COUNTER_SCRIPT(client, [redis_key], [window_ms])
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


# --- curator login lockout ---------------------------------------------------------------------


def _client_address(request: HttpRequest | None) -> str | None:
    if request is None:
        return None
    # DRF's rule (LEPUS_NUM_PROXIES): never trust a client-sent X-Forwarded-For as it is.
    return str(BaseThrottle().get_ident(request))  # type: ignore[arg-type]


@dataclass(frozen=True)
class _LoginKeys:
    """The cache keys of one login attempt: the username alone, the (username, address) pair and
    the address alone (no address: a login without a request, e.g. `authenticate()` in a shell)."""

    user: str
    pair: str | None
    address: str | None

    @classmethod
    def of(cls, username: str, address: str | None) -> _LoginKeys:
        name = hashlib.sha256(username.strip().casefold().encode("utf-8")).hexdigest()[:32]
        if not address:
            return cls(user=f"login:user:{name}", pair=None, address=None)
        return cls(
            user=f"login:user:{name}",
            pair=f"login:pair:{name}:{address}",
            address=f"login:addr:{address}",
        )


def login_slowdown_seconds(user_failures: int) -> float:
    """How long after a username's last failure an address that failed it must wait: nothing
    below `LEPUS_LOGIN_SLOWDOWN_AFTER` failures of the username (all addresses together), then
    1 s doubling with each failure, at most `LEPUS_LOGIN_SLOWDOWN_MAX_SECONDS`."""
    excess = user_failures - settings.LEPUS_LOGIN_SLOWDOWN_AFTER
    if excess < 0:
        return 0.0
    return float(min(settings.LEPUS_LOGIN_SLOWDOWN_MAX_SECONDS, 2 ** min(excess, 30)))


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
        keys = _LoginKeys.of(username, _client_address(request))
        try:
            refusal = _refusal(keys)
        except Exception as error:
            _unavailable(request, error)
        if refusal is not None:
            reason, retry_after = refusal
            _flag(request, reason, retry_after)
            raise LoginLocked("too many failed logins")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        try:
            if user is None:
                _failure(keys)
            elif keys.pair is not None:
                # The owner's right password clears only this address's count: the username's
                # slow-down stays for the addresses that keep failing it.
                cache.delete(f"{keys.pair}:failures")
        except Exception as error:
            _unavailable(request, error)
        return user

    def _username_field(self) -> str:
        from django.contrib.auth import get_user_model

        return str(get_user_model().USERNAME_FIELD)


def _refusal(keys: _LoginKeys) -> tuple[str, float] | None:
    """("locked" | "slow", seconds to wait) when this attempt is refused without checking the
    password; None when the password may be checked."""
    if keys.pair is None or keys.address is None:
        return None
    names = [f"{keys.pair}:locked", f"{keys.address}:locked", f"{keys.pair}:failures"]
    names.append(f"{keys.user}:retry_at")
    found = cache.get_many(names)
    if f"{keys.pair}:locked" in found or f"{keys.address}:locked" in found:
        return "locked", float(settings.LEPUS_LOGIN_LOCKOUT_SECONDS)
    # The slow-down holds back only addresses that already failed this username: an address that
    # has not failed it (the owner's, as a rule) is never refused by it.
    if int(found.get(f"{keys.pair}:failures") or 0) > 0:
        wait = float(found.get(f"{keys.user}:retry_at") or 0.0) - time.time()
        if wait > 0:
            return "slow", wait
    return None


def _failure(keys: _LoginKeys) -> None:
    seconds = settings.LEPUS_LOGIN_LOCKOUT_SECONDS
    user_failures, _left = counter_hit(f"{keys.user}:failures", seconds)
    slowdown = login_slowdown_seconds(user_failures)
    if slowdown:
        cache.set(f"{keys.user}:retry_at", time.time() + slowdown, timeout=seconds)
    limits = [(keys.pair, settings.LEPUS_LOGIN_MAX_FAILURES)]
    limits.append((keys.address, settings.LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS))
    for prefix, limit in limits:
        if prefix is None:
            continue
        failures, _left = counter_hit(f"{prefix}:failures", seconds)
        if failures >= limit:
            cache.set(f"{prefix}:locked", 1, timeout=seconds)
            logger.warning("login locked for %s after %d failures", prefix, failures)


def _unavailable(request: HttpRequest | None, error: Exception) -> NoReturn:
    logger.warning("login lockout store unavailable, refusing the login: %s", error)
    _flag(request, "unavailable", 0.0)
    raise LoginLocked("lockout store unavailable")


def _flag(request: HttpRequest | None, reason: str, retry_after: float) -> None:
    if request is not None:
        request.lepus_login_refused = (reason, retry_after)  # type: ignore[attr-defined]


class LoginView(auth_views.LoginView):
    """Django's login page; a refused attempt answers 429 with a Retry-After (503 while the
    lockout store is unreachable) and a message saying so instead of "wrong password"."""

    def form_invalid(self, form: Any) -> HttpResponse:
        refused = getattr(self.request, "lepus_login_refused", None)
        if refused is None:
            return super().form_invalid(form)
        reason, retry_after = refused
        seconds = max(1, math.ceil(retry_after))
        if reason == "locked":
            message = (
                "Too many failed log-in attempts from this address. "
                f"Try again in {math.ceil(seconds / 60)} minutes."
            )
        elif reason == "slow":
            message = (
                f"Too many failed log-in attempts for this account. Try again in {seconds} seconds."
            )
        else:
            message = "Logging in is temporarily unavailable. Please try again in a moment."
        context = self.get_context_data(form=form, refusal=message)
        response = self.render_to_response(context, status=503 if reason == "unavailable" else 429)
        if reason != "unavailable":
            response["Retry-After"] = str(seconds)
        return response
