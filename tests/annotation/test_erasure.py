"""Erasing a participant (docs/privacy.md): no trace of their platform ids or free text is left in
any table, in storage, in the logs' structured fields or in Redis; published releases stay byte for
byte and verify; the next release reflects the erasure; aggregates, slots and review queue follow.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
from typing import Any

import boto3
import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from annotation.models import (
    AuditEntry,
    CampaignCandidate,
    CampaignClip,
    ErasureMode,
    Judgment,
    Participation,
    ParticipationStatus,
    Platform,
    ReviewAction,
    ReviewItem,
    Worker,
)
from annotation.quality.exclusions import worker_exclude, worker_include
from annotation.quality.run import qc_run_inline
from annotation.services.erasure import participant_erase
from common import storage
from export.services import release_verify
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker
from tests.export.helpers import build

pytestmark = pytest.mark.django_db

# Distinctive values: none of them can occur anywhere by chance.
PLATFORM_ID = "5e7a11ce0ddba11f00d5eed1"
SESSION_ID = "sess-quokkazanzibar-4417"
STUDY_ID = "aa11bb22cc33dd44ee55ff66"
REASON = "the zebra-marmalade caption 9321 is nonsense"
CURATOR_NOTE = f"copied answers, see worker {PLATFORM_ID}"
NEEDLES = (PLATFORM_ID, SESSION_ID, "zebra-marmalade")


def _worker_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Worker {token}")
    return client


def _join_and_rate(slug: str, *, rounds: int) -> str:
    """Join through the API as the distinctive worker and rate `rounds` clips, every rating 2 with
    the distinctive reason; returns the worker token."""
    joined = APIClient().post(
        f"/api/v1/campaigns/{slug}/join",
        {
            "platform": "prolific",
            "external_id": PLATFORM_ID,
            "study_id": STUDY_ID,
            "session_id": SESSION_ID,
        },
        format="json",
    )
    assert joined.status_code == 200, joined.content
    token = joined.json()["worker_token"]
    worker = _worker_client(token)
    for _round in range(rounds):
        offer = worker.post("/api/v1/worker/assignments/next").json()
        answer = worker.post(
            f"/api/v1/worker/assignments/{offer['assignment_id']}/submit",
            {"ratings": all_candidate_ratings(offer, value=2, reason=REASON)},
            format="json",
        )
        assert answer.status_code == 201, answer.content
    return token


def _database_hits(needle: str) -> list[str]:
    """Every text, varchar and JSON column of every table of the schema, searched for `needle`."""
    hits = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND data_type IN "
            "('text', 'character varying', 'character', 'json', 'jsonb', 'ARRAY')"
        )
        columns = cursor.fetchall()
        assert len(columns) > 50  # the scan sees the whole schema
        for table, column in columns:
            cursor.execute(
                f'SELECT count(*) FROM "{table}" WHERE "{column}"::text LIKE %s', [f"%{needle}%"]
            )
            if cursor.fetchone()[0]:
                hits.append(f"{table}.{column}")
    return hits


def _storage_objects() -> dict[str, bytes]:
    """Every object of the test bucket (the moto server on loopback), by key."""
    client = boto3.client(
        "s3", endpoint_url=settings.LEPUS_S3_ENDPOINT_URL, region_name="us-east-1"
    )
    bucket = settings.LEPUS_S3_BUCKET
    keys = [
        item["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for item in page.get("Contents", [])
    ]
    return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


def _redis_hits(needle: str) -> list[str]:
    """Keys of the broker's Redis database and of the cache whose name or value holds `needle`."""
    hits = []
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    for key in broker.scan_iter():
        kind = broker.type(key)
        if kind == b"string":
            values = [broker.get(key) or b""]
        elif kind == b"list":
            values = broker.lrange(key, 0, -1)
        elif kind == b"hash":
            values = [k + v for k, v in broker.hgetall(key).items()]
        elif kind == b"set":
            values = list(broker.smembers(key))
        elif kind == b"zset":
            values = list(broker.zrange(key, 0, -1))
        else:
            values = []
        if needle.encode() in key or any(needle.encode() in value for value in values):
            hits.append(f"broker:{key!r}")
    local = getattr(cache, "_cache", None)  # the suite's LocMemCache (REDIS_URL unset)
    if isinstance(local, dict):
        for key, value in local.items():
            if needle in key or needle.encode() in pickle.dumps(value):
                hits.append(f"cache:{key}")
    return hits


def _log_hits(records: list[logging.LogRecord], needle: str) -> list[str]:
    hits = []
    for record in records:
        fields = {**record.__dict__, "message": record.getMessage()}
        if needle in repr(fields):
            hits.append(f"{record.name}: {record.getMessage()[:80]}")
    return hits


@pytest.mark.parametrize("mode", [ErasureMode.DELETE, ErasureMode.PSEUDONYMISE])
def test_no_trace_of_ids_or_text_is_left_and_published_releases_stay_byte_identical(
    mode, s3_storage, curator, caplog
):
    caplog.set_level(logging.INFO)
    campaign = crowd_campaign(
        slug=f"erase-{mode}",
        clips=2,
        candidates_per_clip=2,
        judgments_per_candidate=2,
        reason_required_at_or_below=2,
        erasure_mode=mode,
    )
    _join_and_rate(campaign.slug, rounds=2)
    others = [quality_worker(campaign, f"other-{index}") for index in range(2)]
    for item in campaign.items.all():
        quality_judge(others[item.pk % 2], item, {key: 3 for key in campaign.question_keys})
    person = Participation.objects.get(worker__external_id=PLATFORM_ID)
    assert person.platform_data == {"study_id": STUDY_ID, "session_id": SESSION_ID}
    qc_run_inline(campaign=campaign)
    # A curator names the worker in a note; the QC run's summary lists them by id; re-included.
    worker_exclude(participation=person, actor=curator, reason=CURATOR_NOTE)
    run = qc_run_inline(campaign=campaign)
    assert PLATFORM_ID in json.dumps(run.summary)
    worker_include(participation=person, actor=curator, note=f"{PLATFORM_ID} was fine after all")
    published = build(campaigns=[campaign], seed=3, include_raw_judgments=True)
    before_erasure = _storage_objects()
    release_files = {
        key: body
        for key, body in before_erasure.items()
        if key.startswith(published.storage_prefix + "/")
    }
    assert release_files and any(REASON.encode() in body for body in release_files.values())
    # The scans can fail: before the erasure they find every value.
    for needle in NEEDLES:
        assert _database_hits(needle), needle

    outcome = participant_erase(
        worker=person.worker, actor=curator, requested_by="curator"
    ).as_dict()

    assert outcome["participations"] == 1 and outcome["campaigns"] == {campaign.slug: mode}
    assert outcome["reasons_erased"] == 4  # two clips of two candidates
    after_erasure = _storage_objects()
    assert {key: after_erasure[key] for key in release_files} == release_files
    assert release_verify(release=published)["ok"] is True
    following = build(campaigns=[campaign], seed=3, include_raw_judgments=True)
    after_next = _storage_objects()
    assert any(key.startswith(following.storage_prefix + "/") for key in after_next)
    for needle in NEEDLES:
        assert _database_hits(needle) == [], needle
        leaks = [
            key
            for key, body in after_next.items()
            if key not in release_files and (needle in key or needle.encode() in body)
        ]
        assert leaks == [], needle
        assert _redis_hits(needle) == [], needle
        assert _log_hits(caplog.records, needle) == [], needle
    assert not Worker.objects.filter(platform=Platform.PROLIFIC, external_id=PLATFORM_ID).exists()
    entry = AuditEntry.objects.get(action=ReviewAction.ERASE_PARTICIPANT)
    assert entry.actor == curator and entry.campaign == campaign
    assert entry.after["mode"] == mode and entry.after["requested_by"] == "curator"
    if mode == ErasureMode.PSEUDONYMISE:  # the curators' notes stay, without the id
        note = AuditEntry.objects.get(action=ReviewAction.INCLUDE_WORKER).note
        assert note == "[erased] was fine after all"

    next_records = [json.loads(line) for line in _jsonl(following)]
    first_records = [json.loads(line) for line in _jsonl(published)]
    raters = {j["worker"] for r in next_records for j in r.get("raw_judgments") or []}
    first_raters = {j["worker"] for r in first_records for j in r.get("raw_judgments") or []}
    assert len(first_raters) == 3
    assert len(first_records) == 4
    if mode == ErasureMode.DELETE:
        # The others' judgments remain, one per candidate: below quota, so nothing is final and
        # the freed slots are handed out again.
        assert Judgment.objects.filter(campaign=campaign).count() == 4
        items = CampaignCandidate.objects.filter(campaign=campaign)
        assert {(i.kept_judgments, i.slots_taken, i.is_finalised) for i in items} == {(1, 1, False)}
        assert set(
            CampaignClip.objects.filter(campaign=campaign).values_list("open_slots", flat=True)
        ) == {2}
        assert next_records == [] and raters == set()
    else:
        assert len(next_records) == 4
        assert len(raters) == 3 and len(raters & first_raters) == 2
        kept = Judgment.objects.filter(campaign=campaign, participation=person)
        assert kept.count() == 4 and set(kept.values_list("reason", flat=True)) == {""}
        person.refresh_from_db()
        assert person.worker.platform == Platform.ERASED and person.platform_data == {}
        assert person.token_hash is None and person.worker.external_id.startswith("erased-")


def _jsonl(release: Any) -> list[str]:
    lines = []
    for split in ("train", "validation"):
        key = f"{release.storage_prefix}/data/{split}.jsonl"
        if storage.exists(key):
            lines += storage.read_bytes(key).decode().splitlines()
    return lines
