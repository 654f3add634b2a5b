"""The links of the browser's rows, built from URL patterns reversed once per request.

A table page holds up to 200 rows with four links each; `{% url %}` per link costs a resolver
walk each time (a third of a 50-row page's time in the profile of `bench/data_browser.py`), a
format string per link next to nothing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator

_SLUG = "lepus-slug-placeholder"
_ID = 987654321


def _pattern(name: str, *args: Any) -> str:
    url = reverse(name, args=args)
    return url.replace(_SLUG, "{slug}").replace(str(_ID), "{id}")


class Links:
    """Format strings of the browser's detail pages."""

    def __init__(self) -> None:
        self.clip = _pattern("annotation:browse-clip", _ID)
        self.candidate = _pattern("annotation:browse-candidate", _ID)
        self.campaign = _pattern("annotation:campaign-detail", _SLUG)
        self.worker = _pattern("annotation:quality-worker", _SLUG, _ID)

    def judgments(self, rows: Iterable[Any]) -> None:
        """Links and the cells' texts of judgment rows: each cell one plain attribute, so a
        100-row page resolves a few variables a row instead of a filter chain per cell."""
        for judgment in rows:
            item = judgment.campaign_candidate
            slug = judgment.campaign.slug
            judgment.candidate_url = self.candidate.format(id=judgment.campaign_candidate_id)
            judgment.clip_url = self.clip.format(id=item.clip_id)
            judgment.worker_url = self.worker.format(slug=slug, id=judgment.participation_id)
            judgment.when = timezone.localtime(judgment.created_at).strftime("%Y-%m-%d %H:%M")
            judgment.worker_name = judgment.participation.worker.external_id
            judgment.campaign_slug = slug
            judgment.clip_name = item.clip.vatex_id
            judgment.caption = Truncator(item.candidate.text).chars(60)
            judgment.system_name = str(item.candidate.system or "")
            values = judgment.values
            judgment.ratings = " · ".join(f"{key[:5]} {value}" for key, value in values.items())
            judgment.ratings_title = ", ".join(f"{key} {value}" for key, value in values.items())
            judgment.reason_short = Truncator(judgment.reason).chars(80) or "—"
            milliseconds = judgment.server_ms
            judgment.server_seconds = "—" if milliseconds is None else round(milliseconds / 1000)
            judgment.state = (
                f"excluded ({judgment.excluded_by})" if judgment.is_excluded else "kept"
            )

    def candidates(self, rows: Iterable[Any]) -> None:
        for item in rows:
            item.candidate_url = self.candidate.format(id=item.pk)
            item.clip_url = self.clip.format(id=item.clip_id)
            item.campaign_url = self.campaign.format(slug=item.campaign.slug)

    def clips(self, rows: Iterable[Any]) -> None:
        for clip in rows:
            clip.clip_url = self.clip.format(id=clip.pk)

    def workers(self, rows: Iterable[Any]) -> None:
        for participation in rows:
            slug = participation.campaign.slug
            participation.worker_url = self.worker.format(slug=slug, id=participation.pk)
            participation.campaign_url = self.campaign.format(slug=slug)
