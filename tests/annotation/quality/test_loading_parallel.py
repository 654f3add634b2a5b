"""The whole-campaign judgment read in two halves (two connections) gives exactly the columns of
the single read, in the same order; inside a transaction it stays on the caller's connection."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection, transaction

from annotation.models import Judgment
from annotation.quality import loading
from tests.annotation.quality.factories import (
    quality_crowd_campaign,
    quality_judge,
    quality_worker,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spread_campaign():
    campaign = quality_crowd_campaign(slug="halves", clips=24, candidates_per_clip=3, quota=4)
    workers = [quality_worker(campaign, f"w{index}") for index in range(4)]
    for number, item in enumerate(campaign.items.order_by("id")):
        for offset, worker in enumerate(workers):
            value = 1 + (number + offset) % 5
            quality_judge(
                worker,
                item,
                {"descriptiveness": value, "relevance": 6 - value, "fluency": 3},
                server_ms=1000 * (number % 7) + offset,
            )
    # Rewrite a few rows, so the table's physical order is not the insertion order.
    Judgment.objects.filter(campaign=campaign, participation=workers[1]).update(server_ms=123)
    with connection.cursor() as cursor:
        # Compacted (rows rolled back by earlier tests leave empty pages in front), so that the
        # campaign's rows fill both halves of the table.
        cursor.execute(f"VACUUM FULL {Judgment._meta.db_table}")
        cursor.execute(f"ANALYZE {Judgment._meta.db_table}")
        cursor.execute(
            "SELECT relpages FROM pg_class WHERE oid = %s::regclass", [Judgment._meta.db_table]
        )
        assert cursor.fetchone()[0] >= 2  # two halves to read
    return campaign


def _columns(campaign):
    data = loading.campaign_slice_load(campaign=campaign)
    judgments = data.judgments
    return {
        "ids": judgments.ids,
        "item": judgments.item,
        "worker": judgments.worker,
        "server_ms": judgments.server_ms,
        "excluded": judgments.excluded,
        "imported": judgments.imported,
        "values": judgments.values,
        "workers": data.workers.ids,
        "candidates": data.candidates.ids,
    }


def test_two_halves_read_the_same_columns_in_the_same_order(spread_campaign, monkeypatch):
    monkeypatch.setattr(loading, "PARALLEL_READ_MIN_PAGES", 10**9)
    single = _columns(spread_campaign)
    halves: list[int] = []
    fetch = loading._fetch_in_own_connection

    def counted(sql, params, columns):
        result = fetch(sql, params, columns)
        halves.append(len(result["id"]))
        return result

    monkeypatch.setattr(loading, "PARALLEL_READ_MIN_PAGES", 0)
    monkeypatch.setattr(loading, "_fetch_in_own_connection", counted)
    parallel = _columns(spread_campaign)
    assert len(halves) == 2 and all(count > 0 for count in halves)
    assert sum(halves) == len(single["ids"]) == 24 * 3 * 4
    for name, values in single.items():
        assert np.array_equal(parallel[name], values), name


def test_inside_a_transaction_the_read_stays_on_this_connection(spread_campaign, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(loading, "PARALLEL_READ_MIN_PAGES", 0)
    monkeypatch.setattr(
        loading, "_fetch_in_own_connection", lambda *arguments: calls.append("thread")
    )
    with transaction.atomic():
        # Uncommitted here: another connection would not see it.
        Judgment.objects.filter(campaign=spread_campaign).update(server_ms=7)
        data = loading.campaign_slice_load(campaign=spread_campaign)
        assert (data.judgments.server_ms == 7).all()
    assert calls == []
