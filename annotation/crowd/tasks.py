"""Celery tasks of the crowd wing: returning the slots of expired leases (beat), and deciding again
how many judgments candidates want (adaptive allocation)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="annotation.expire_leases", ignore_result=True)
def expire_leases() -> int:
    """Return the slots of assignments whose lease ran out (beat, every minute)."""
    from annotation.crowd.services.assignment import assignments_expire

    return assignments_expire()


@shared_task(name="annotation.allocation_redecide", ignore_result=True)
def allocation_redecide(*, campaign_id: int, campaign_candidate_ids: list[int]) -> int:
    """Decide again how many judgments these candidates want from what is known now (kept
    ratings, standard errors, metric scores); sent by name by the metric's scoring job after it
    wrote scores, so a metric that disagrees with the crowd opens a slot. Nothing for a fixed
    campaign."""
    from annotation.crowd.services.allocation import allocation_redecide as redecide

    return redecide(campaign_id=campaign_id, campaign_candidate_ids=campaign_candidate_ids)
