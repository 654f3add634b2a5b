"""Publishing the after-submission quality work, debounced per campaign.

One task per submission costs a broker round trip on the web path and a task on a worker for every
submit, and at tens of submissions per second each task mostly repeats the work of the one before
(the same candidates, the same neighbours). Instead the first submission of a campaign in a window
of `LEPUS_QC_DEBOUNCE_SECONDS` marks the campaign pending (one atomic `cache.add`) and publishes one
`annotation.quality_catch_up` task delayed by the window; later submissions in the window see the
mark and publish nothing. The task clears the mark before it reads, so a submission stored while it
runs schedules the next pass, then updates every worker who submitted since their statistics were
computed, in one pass. A QC verdict (e.g. an exclusion of a robot) therefore lands at most a window
plus one pass after the submission that triggers it.

With the window at 0 every submission publishes its own `annotation.after_submission` task. Neither
path lets the web request depend on the cache or the broker: their failures are logged, and the
periodic `annotation.quality_sweep` catches up.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

logger = logging.getLogger(__name__)


def pending_key(campaign_id: int) -> str:
    return f"lepus:qc-pending:{campaign_id}"


def after_submission_schedule(*, campaign_id: int, assignment_id: int) -> None:
    """Arrange for the quality work of a stored submission (on commit of the current transaction)."""
    from annotation import tasks

    window = float(settings.LEPUS_QC_DEBOUNCE_SECONDS)
    if window <= 0:
        from common.tasks import enqueue

        enqueue(tasks.after_submission, assignment_id)
        return
    transaction.on_commit(lambda: catch_up_publish(campaign_id=campaign_id, countdown=window))


def catch_up_publish(*, campaign_id: int, countdown: float) -> bool:
    """Publish one delayed catch-up pass unless one is already pending; True if published."""
    from annotation import tasks
    from common.tasks import publish_now

    key = pending_key(campaign_id)
    # The mark outlives the window so that a pass lost with its worker blocks nothing for long.
    lifetime = int(countdown) + 60
    try:
        if not cache.add(key, 1, timeout=lifetime):
            return False
    except Exception as error:  # the cache is down: publish anyway, the broker decides
        logger.warning("quality debounce cache unavailable (%s); publishing directly", error)
    if not publish_now(tasks.quality_catch_up, campaign_id, countdown=countdown):
        pending_clear(campaign_id)  # the next submission tries again (or the sweep catches up)
        return False
    return True


def pending_clear(campaign_id: int) -> None:
    try:
        cache.delete(pending_key(campaign_id))
    except Exception as error:
        logger.warning("quality debounce cache unavailable (%s)", error)
