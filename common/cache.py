"""Django's Redis cache with one client object per connection pool instead of one per call.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` around the pool on every cache
call, and redis-py's constructor fills a case-insensitive table of ~200 response callbacks each
time: measured in-process on the worker API (bench/crowd_hot_path.py, cProfile with CPU time),
that was the largest single item of a `next` → `submit` cycle, about a quarter of the web
process's CPU, for three cache calls per cycle (two throttle counters, the quality debounce mark).
A `redis.Redis` is safe to share between threads (each command takes a connection from the pool),
and Django keeps one cache object per thread anyway, so keeping the client is safe.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient
from redis.exceptions import NoScriptError


class ReusedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, servers: Any, **options: Any) -> None:
        super().__init__(servers, **options)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        this: Any = self  # Django's private attributes are not in its type stubs
        index = this._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            # One client per server (writes go to the first, reads to a random replica).
            if index not in this._pools:
                this._pools[index] = this._pool_class.from_url(
                    this._servers[index], **this._pool_options
                )
            client = self._clients.setdefault(
                index, this._client(connection_pool=this._pools[index])
            )
        return client


class RedisCache(DjangoRedisCache):
    """`django.core.cache.backends.redis.RedisCache`, reusing its redis-py clients."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ReusedClientRedisCacheClient


def redis_writer(key: str) -> tuple[Any, str] | None:
    """(redis-py client for writes, the full Redis key) of `key` in the default cache when that
    cache is Redis, for commands Django's cache API has no word for (a Lua script, SET NX GET);
    None for any other cache backend."""
    backend = caches["default"]
    if not isinstance(backend, DjangoRedisCache):
        return None
    redis_key = backend.make_and_validate_key(key)
    return backend._cache.get_client(redis_key, write=True), redis_key


class Script:
    """A Lua script run by its SHA (`EVALSHA`), sent whole only when the server does not know it
    yet (first use, a restart, `SCRIPT FLUSH`): one round trip, atomic, and on any Redis from 2.6
    (unlike newer command options such as `SET … NX GET`, Redis 7.0)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(self, client: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)
