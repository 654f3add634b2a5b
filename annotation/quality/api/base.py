"""What the quality API views share: the schema tag, the campaign lookup and bounded paging
parameters."""

from __future__ import annotations

from django.shortcuts import get_object_or_404

from annotation.models import Campaign

TAG = ["quality"]


def campaign_or_404(slug: str) -> Campaign:
    return get_object_or_404(Campaign, slug=slug)


def bounded_int(raw: str | None, *, default: int, high: int) -> int:
    """A query parameter as an int in [0, high]; `default` when absent or not a number."""
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        value = default
    return max(0, min(value, high))
