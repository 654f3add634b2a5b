"""The one bulk writer (`common.bulk`): every value COPY loads reads back exactly, the defaults
are the fields' own, the database still checks constraints, and a value of a type COPY's text has
no rule for is refused, never guessed."""

from __future__ import annotations

import datetime
from decimal import Decimal
from uuid import UUID

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation.models import Judgment, JudgmentSource, Participation
from common import bulk
from tests.factories import CampaignCandidateFactory, WorkerFactory

pytestmark = pytest.mark.django_db


TRICKY_TEXTS = [
    "a\ttab",
    "a\nnewline",
    "a\rcarriage return",
    "a \\ backslash",
    'a "double" quote',
    "a, comma",
    "\\N",
    "",
    "café — 日本",
    "\\.",
    "a\n\\.\nb",
    'all: \t\n\r\\ " , \\N',
]


def test_rows_insert_stores_every_value_exactly(monkeypatch):
    """Texts with COPY's and CSV's special characters, an empty text beside a NULL, JSON with nested
    quotes, datetimes, and the field defaults (boolean, datetime, JSON) read back as given, in
    several COPY pages, each reported."""
    monkeypatch.setattr(bulk, "BULK_BATCH_SIZE", 5)
    item = CampaignCandidateFactory()
    campaign = item.campaign
    workers = WorkerFactory.create_batch(len(TRICKY_TEXTS) + 1)
    tokens = [*TRICKY_TEXTS, None]
    consented = [
        timezone.now() - datetime.timedelta(microseconds=n) for n in range(len(TRICKY_TEXTS))
    ]
    consented.append(None)
    platform_data = [
        {"study": f'say "{text}"', "nested": {'"k"': ['\\"', text]}} for text in tokens
    ]
    reported: list[tuple[str, int, int]] = []
    before = timezone.now()

    bulk.rows_insert(
        Participation,
        [
            {
                "campaign_id": campaign.pk,
                "worker_id": worker.pk,
                "token_hash": token,
                "platform_data": data,
                "consented_at": when,
            }
            for worker, token, data, when in zip(
                workers, tokens, platform_data, consented, strict=True
            )
        ],
        stage="participations",
        progress=lambda stage, done, total: reported.append((stage, done, total)),
    )
    participations = list(Participation.objects.filter(campaign=campaign).order_by("pk"))
    assert [p.worker_id for p in participations] == [worker.pk for worker in workers]
    assert [p.token_hash for p in participations] == tokens
    assert Participation.objects.filter(token_hash__isnull=True).count() == 1
    assert Participation.objects.filter(token_hash="").count() == 1
    assert [p.platform_data for p in participations] == platform_data
    assert [p.consented_at for p in participations] == consented
    assert reported == [("participations", done, len(tokens)) for done in (0, 5, 10, 13)]

    values = {"overall": 4, "note": 'he said "no, \\"never\\""', "list": [None, True, 1.5]}
    server_ms = [None, *range(len(TRICKY_TEXTS))]
    bulk.rows_insert(
        Judgment,
        [
            {
                "campaign_id": campaign.pk,
                "campaign_candidate_id": item.pk,
                "participation_id": participation.pk,
                "values": values,
                "reason": text,
                "source": JudgmentSource.IMPORTED,
                "server_ms": ms,
            }
            for participation, text, ms in zip(
                participations, [*TRICKY_TEXTS, "last"], server_ms, strict=True
            )
        ],
        stage="judgments",
        progress=None,
    )
    after = timezone.now()
    judgments = list(Judgment.objects.filter(campaign=campaign).order_by("pk"))
    assert [j.participation_id for j in judgments] == [p.pk for p in participations]
    assert [j.reason for j in judgments] == [*TRICKY_TEXTS, "last"]
    assert [j.server_ms for j in judgments] == server_ms
    assert all(j.values == values for j in judgments)
    assert {j.source for j in judgments} == {JudgmentSource.IMPORTED}
    # The defaults: one value per column, as the field gives it.
    assert all(j.is_excluded is False for j in judgments)
    assert {(j.excluded_by, j.exclusion_reason) for j in judgments} == {("", "")}
    assert {(j.assignment_id, j.excluded_at, j.client_active_ms) for j in judgments} == {
        (None, None, None)
    }
    assert all(j.exclusion_detail == {} for j in judgments)
    created = {j.created_at for j in judgments}
    assert len(created) == 1
    assert before <= created.pop() <= after
    joined = {p.joined_at for p in participations}
    assert len(joined) == 1
    assert before <= joined.pop() <= after

    # The database still checks what COPY loads: a second empty token breaks the unique constraint.
    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.rows_insert(
            Participation,
            [{"campaign_id": campaign.pk, "worker_id": WorkerFactory().pk, "token_hash": ""}],
            stage="participations",
            progress=None,
        )


def test_copy_text_has_one_rule_per_type_and_refuses_the_others():
    assert bulk.copy_text(None) == "\\N"
    assert bulk.copy_text("a\tb\nc\rd\\e") == "a\\tb\\nc\\rd\\\\e"
    assert (bulk.copy_text(True), bulk.copy_text(False)) == ("t", "f")
    assert bulk.copy_text(7) == "7" and bulk.copy_text(1.5) == "1.5"
    assert bulk.copy_text(Decimal("2.50")) == "2.50"
    uuid = UUID("12345678-1234-5678-1234-567812345678")
    assert bulk.copy_text(uuid) == str(uuid)
    assert bulk.copy_text(datetime.date(2026, 1, 2)) == "2026-01-02"
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert bulk.copy_text(moment) == "2026-01-02T03:04:05+00:00"
    for value in ({"a": 1}, [1, 2], b"bytes", object()):
        with pytest.raises(TypeError, match="no COPY text"):
            bulk.copy_text(value)
