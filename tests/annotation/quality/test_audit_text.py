"""The audit log reads as sentences for every kind of decision: a worker excluded by a curator and
re-included, a candidate dropped in review, and undos (the review page's claim, ratings and
judgment sentences are checked in test_review_browser.py)."""

from __future__ import annotations

import pytest

from annotation.models import AuditEntry, Participation, ReviewItem
from annotation.quality.audit_text import audit_sentences
from annotation.quality.exclusions import worker_exclude, worker_include
from annotation.quality.review import audit_undo, review_resolve

pytestmark = pytest.mark.django_db


def _sentences(campaign) -> list[str]:
    entries = AuditEntry.objects.filter(campaign=campaign).select_related("actor", "undoes")
    return [entry.sentence for entry in audit_sentences(entries.order_by("id"))]


def test_worker_exclusion_inclusion_drop_and_undo_read_as_sentences(quality_campaign, curator):
    participation = Participation.objects.get(
        campaign=quality_campaign, worker__external_id="dash-1"
    )
    worker_exclude(participation=participation, actor=curator, reason="rated without watching")
    worker_include(participation=participation, actor=curator, note="spoke to them")
    item = ReviewItem.objects.filter(campaign=quality_campaign).order_by("id").first()
    review_resolve(item=item, user=curator, drop=True, note="not a caption")
    drop = AuditEntry.objects.get(campaign=quality_campaign, action="drop")
    audit_undo(entry=drop, user=curator, note="dropped by mistake")

    candidate = item.campaign_candidate_id
    assert _sentences(quality_campaign) == [
        "Worker dash-1 excluded by curator; status active → excluded, 6 judgment(s) excluded; "
        "note “Excluded by a curator: rated without watching”.",
        "Worker dash-1 re-included by curator; status excluded → active, 6 judgment(s) back, "
        "0 kept out; note “spoke to them”.",
        f"Review item {item.pk} claimed by curator; status open → claimed.",
        f"Candidate {candidate} dropped from releases by curator; status → resolved; note "
        f"“not a caption”.",
        f"Curator undid “dropped the candidate from releases” on candidate {candidate}: back in "
        f"releases; note “dropped by mistake”.",
    ]
