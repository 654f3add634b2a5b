"""Payments export: Prolific bulk bonus lines and the full CSV, as page downloads and a command."""

from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from annotation.crowd.services.payments import payments_full_csv, payments_prolific_bonus_csv
from annotation.models import Assignment, AssignmentStatus, ParticipationStatus, Platform
from tests.annotation.crowd_factories import crowd_campaign
from tests.factories import ClipFactory, ParticipationFactory, WorkerFactory

pytestmark = pytest.mark.django_db


def _work(campaign, worker, *, submitted: int, live: int = 0, active_ms: int = 60_000):
    participation = ParticipationFactory(
        campaign=campaign,
        worker=worker,
        platform_data={"study_id": "S1", "session_id": f"sess-{worker.external_id}"},
    )
    now = timezone.now()
    for index in range(submitted + live):
        Assignment.objects.create(
            campaign=campaign,
            participation=participation,
            clip=ClipFactory(),
            status=AssignmentStatus.SUBMITTED if index < submitted else AssignmentStatus.LIVE,
            expires_at=now,
            submitted_at=now if index < submitted else None,
            client_active_ms=active_ms if index < submitted else None,
            server_ms=active_ms + 5000 if index < submitted else None,
        )
    return participation


@pytest.fixture
def paid_campaign():
    campaign = crowd_campaign(clips=1, pay_per_assignment=Decimal("0.35"), currency="GBP")
    _work(campaign, WorkerFactory(external_id="5f0000000000000000000001"), submitted=3, live=1)
    excluded = _work(campaign, WorkerFactory(external_id="5f0000000000000000000002"), submitted=1)
    excluded.status = ParticipationStatus.EXCLUDED
    excluded.save()
    _work(campaign, WorkerFactory(external_id="5f0000000000000000000003"), submitted=0, live=1)
    _work(
        campaign,
        WorkerFactory(platform=Platform.MTURK, external_id="=HYPERLINK(evil)"),
        submitted=2,
    )
    _work(campaign, WorkerFactory(platform=Platform.IMPORTED, external_id="rater-1"), submitted=5)
    return campaign


def test_prolific_bulk_bonus_lines(paid_campaign):
    text, skipped = payments_prolific_bonus_csv(campaign=paid_campaign)
    assert text == "5f0000000000000000000001,1.05\n5f0000000000000000000002,0.35\n"
    assert skipped == []


def test_the_full_csv_lists_every_crowd_worker(paid_campaign):
    lines = payments_full_csv(campaign=paid_campaign).splitlines()
    assert lines[0] == (
        "platform,external_id,status,assignments_submitted,active_minutes,server_minutes,"
        "amount,currency,study_id,session_id,joined_at,completed_at"
    )
    rows = [line.split(",")[:10] for line in lines[1:]]
    assert rows == [
        ["mturk", "'=HYPERLINK(evil)", "active", "2", "2.00", "2.17", "0.70", "GBP", "S1",
         "sess-=HYPERLINK(evil)"],
        ["prolific", "5f0000000000000000000001", "active", "3", "3.00", "3.25", "1.05", "GBP",
         "S1", "sess-5f0000000000000000000001"],
        ["prolific", "5f0000000000000000000002", "excluded", "1", "1.00", "1.08", "0.35", "GBP",
         "S1", "sess-5f0000000000000000000002"],
        ["prolific", "5f0000000000000000000003", "active", "0", "0.00", "0.00", "0.00", "GBP",
         "S1", "sess-5f0000000000000000000003"],
    ]  # fmt: skip


def test_page_downloads(curator_client, paid_campaign):
    bonus = curator_client.get(f"/dashboard/campaigns/{paid_campaign.slug}/payments.csv")
    full = curator_client.get(f"/dashboard/campaigns/{paid_campaign.slug}/payments.csv?format=full")
    bad = curator_client.get(f"/dashboard/campaigns/{paid_campaign.slug}/payments.csv?format=xml")

    assert bonus.status_code == 200
    assert bonus["Content-Type"] == "text/csv; charset=utf-8"
    assert bonus["Content-Disposition"] == 'attachment; filename="pilot-prolific-bonus.csv"'
    assert bonus.content == b"5f0000000000000000000001,1.05\n5f0000000000000000000002,0.35\n"
    assert full.content.decode().count("\n") == 5
    assert bad.status_code == 400
    links = curator_client.get(f"/dashboard/campaigns/{paid_campaign.slug}/links/").content.decode()
    assert "4 workers" in links and "2.10 GBP owed" in links
    assert "payments.csv?format=prolific" in links


def test_payments_api(curator_client, paid_campaign):
    body = curator_client.get(f"/api/v1/campaigns/{paid_campaign.slug}/payments").json()
    assert body["total"] == {
        "workers": 4,
        "assignments_submitted": 6,
        "amount": "2.10",
        "currency": "GBP",
    }
    assert body["workers"][1]["amount"] == "1.05"


def test_payments_export_command(paid_campaign, tmp_path):
    out = StringIO()
    call_command("payments_export", "--campaign", paid_campaign.slug, stdout=out)
    assert out.getvalue() == "5f0000000000000000000001,1.05\n5f0000000000000000000002,0.35\n"

    target = tmp_path / "full.csv"
    summary = StringIO()
    call_command(
        "payments_export",
        "--campaign",
        paid_campaign.slug,
        "--format",
        "full",
        "--output",
        str(target),
        "--json",
        stdout=summary,
    )
    assert json.loads(summary.getvalue()) == {
        "campaign": "pilot",
        "format": "full",
        "output": str(target),
        "lines": 5,
        "skipped": [],
        "workers": 4,
        "assignments_submitted": 6,
        "amount": "2.10",
        "currency": "GBP",
    }
    assert target.read_text().startswith("platform,external_id,")
    with pytest.raises(CommandError):
        call_command("payments_export", "--campaign", "nope", stdout=StringIO())
