"""Celery task of the crowd wing: returning the slots of expired leases (beat)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="annotation.expire_leases", ignore_result=True)
def expire_leases() -> int:
    """Return the slots of assignments whose lease ran out (beat, every minute)."""
    from annotation.crowd.services.assignment import assignments_expire

    return assignments_expire()
