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
from annotation.privacy.services import participant_erase
from annotation.quality.exclusions import worker_exclude, worker_include
from annotation.quality.run import qc_run_inline
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


# --- the routes: worker, curator API, command; slots, review queue, webhook -------------------


ERASE = "/api/v1/worker/erase"


def test_a_worker_erases_themselves_with_their_token_and_their_lease_returns(settings):
    from common import webhooks
    from common.models import WebhookEvent
    from tests.annotation.crowd_factories import crowd_join
    from tests.annotation.quality.factories import quality_slots_consistent

    settings.LEPUS_WEBHOOK_ALLOW_PRIVATE = True
    campaign = crowd_campaign(
        slug="self-erase", clips=3, candidates_per_clip=2, judgments_per_candidate=2,
        erasure_mode=ErasureMode.PSEUDONYMISE,
    )  # fmt: skip
    webhooks.register_endpoint("http://127.0.0.1:9/hook", events=["participant.erased"])
    token, participation = crowd_join(campaign, "worker-leaving")
    client = _worker_client(token)
    offer = client.post("/api/v1/worker/assignments/next").json()
    client.post(
        f"/api/v1/worker/assignments/{offer['assignment_id']}/submit",
        {"ratings": all_candidate_ratings(offer, value=1, reason="boring")},
        format="json",
    )
    live = client.post("/api/v1/worker/assignments/next").json()  # a lease still held
    open_before = sum(CampaignClip.objects.values_list("open_slots", flat=True))

    refused = client.post(ERASE, {"confirm": False}, format="json")
    assert refused.status_code == 400
    assert Worker.objects.filter(external_id="worker-leaving").exists()

    answer = client.post(ERASE, {"confirm": True}, format="json")

    assert answer.status_code == 200
    assert answer.json() == {
        "erased": True,
        "dry_run": False,
        "participations": 1,
        "campaigns": {"self-erase": "pseudonymise"},
        "judgments_deleted": 0,
        "judgments_pseudonymised": 2,
        "reasons_erased": 2,
    }
    assert not Worker.objects.filter(external_id="worker-leaving").exists()
    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.PAUSED
    assert participation.assignments.get(pk=live["assignment_id"]).status == "expired"
    assert sum(CampaignClip.objects.values_list("open_slots", flat=True)) == open_before + 2
    quality_slots_consistent(campaign)
    assert client.get("/api/v1/worker/me").status_code == 401
    assert client.post(ERASE, {"confirm": True}, format="json").status_code == 401
    entry = AuditEntry.objects.get(action=ReviewAction.ERASE_PARTICIPANT)
    assert entry.actor is None and entry.target == f"worker:{participation.pk}"
    assert entry.after == {
        "mode": "pseudonymise",
        "requested_by": "worker",
        "reasons_erased": 2,
        "judgments_kept_under_pseudonym": 2,
    }
    event = WebhookEvent.objects.get()
    assert event.event == "participant.erased" and event.campaign_id == campaign.pk
    assert event.data == {
        "mode": "pseudonymise",
        "requested_by": "worker",
        "judgments_kept_under_pseudonym": 2,
    }


def test_an_excluded_worker_may_still_erase_but_do_nothing_else(curator):
    from tests.annotation.crowd_factories import crowd_join

    campaign = crowd_campaign(slug="excluded-erase", clips=2, candidates_per_clip=2)
    token, participation = crowd_join(campaign, "worker-excluded")
    worker_exclude(participation=participation, actor=curator, reason="spam")
    client = _worker_client(token)
    # Every other route answers the campaign's screen-out (403), and no clip is handed out.
    for answer in (
        client.get("/api/v1/worker/me"),
        client.post("/api/v1/worker/assignments/next"),
    ):
        assert answer.status_code == 403 and answer.json()["state"] == "screened_out"
    answer = client.post(ERASE, {"confirm": True}, format="json")
    assert answer.status_code == 200 and answer.json()["campaigns"] == {"excluded-erase": "delete"}
    assert not Participation.objects.filter(pk=participation.pk).exists()


def test_one_erasure_covers_every_campaign_of_the_person(curator):
    first = quality_crowd_campaign(slug="first", clips=1, candidates_per_clip=2, quota=2)
    second = quality_crowd_campaign(
        slug="second", clips=1, candidates_per_clip=2, quota=2,
        erasure_mode=ErasureMode.PSEUDONYMISE,
    )  # fmt: skip
    for campaign in (first, second):
        person = quality_worker(campaign, "5e7a11ce0ddba11f00d5eed2")
        for item in campaign.items.all():
            judgment = quality_judge(person, item, {k: 3 for k in campaign.question_keys})
            Judgment.objects.filter(pk=judgment.pk).update(reason="my own words")
    client = APIClient()
    client.force_login(curator)
    answer = client.post(
        f"/api/v1/campaigns/first/quality/workers/{person.pk}/erase",
        {"confirm": True},
        format="json",
    )
    assert answer.status_code == 404  # `person` is the second campaign's participation
    answer = client.post(
        f"/api/v1/campaigns/second/quality/workers/{person.pk}/erase",
        {"confirm": True},
        format="json",
    )
    assert answer.status_code == 200
    assert answer.json()["campaigns"] == {"first": "delete", "second": "pseudonymise"}
    assert answer.json()["judgments_deleted"] == 2
    assert answer.json()["judgments_pseudonymised"] == 2
    assert answer.json()["reasons_erased"] == 4
    assert Judgment.objects.filter(campaign=first).count() == 0
    assert not Judgment.objects.exclude(reason="").exists()
    assert set(AuditEntry.objects.values_list("campaign__slug", "actor")) == {
        ("first", curator.pk),
        ("second", curator.pk),
    }


def test_imported_rater_slots_are_refused(curator):
    campaign = quality_crowd_campaign(slug="imported-slots", clips=1, candidates_per_clip=1)
    slot = quality_worker(campaign, "vatex-eval:rater-1", platform=Platform.IMPORTED)
    client = APIClient()
    client.force_login(curator)
    answer = client.post(
        f"/api/v1/campaigns/imported-slots/quality/workers/{slot.pk}/erase",
        {"confirm": True},
        format="json",
    )
    assert answer.status_code == 409
    assert Participation.objects.filter(pk=slot.pk).exists()


def test_the_command_finds_the_person_by_platform_id_and_prints_one_json_object():
    campaign = quality_crowd_campaign(slug="by-command", clips=1, candidates_per_clip=2, quota=2)
    person = quality_worker(campaign, "5e7a11ce0ddba11f00d5eed3")
    for item in campaign.items.all():
        quality_judge(person, item, {k: 3 for k in campaign.question_keys})

    def run(*arguments: str) -> dict[str, Any]:
        out = io.StringIO()
        call_command("erase_participant", "--json", *arguments, stdout=out)
        return json.loads(out.getvalue())

    # As the person quotes it: upper case (Prolific ids are case-insensitive).
    quoted = ["--platform", "prolific", "--external-id", " 5E7A11CE0DDBA11F00D5EED3 "]
    dry = run(*quoted, "--dry-run")
    assert dry == {
        "erased": False,
        "dry_run": True,
        "participations": 1,
        "campaigns": {"by-command": "delete"},
        "judgments_deleted": 2,
        "judgments_pseudonymised": 0,
        "reasons_erased": 0,
    }
    assert Judgment.objects.count() == 2 and not AuditEntry.objects.exists()
    assert run(*quoted)["erased"] is True
    assert Judgment.objects.count() == 0 and not Worker.objects.exists()
    with pytest.raises(Exception, match="no participant with that platform id"):
        run(*quoted)


def test_the_review_queue_and_aggregates_are_recomputed(curator):
    from annotation.quality.run import qc_campaign_full

    campaign = quality_crowd_campaign(slug="disputed", clips=1, candidates_per_clip=1, quota=3)
    item = campaign.items.get()
    keys = campaign.question_keys
    calm = [quality_worker(campaign, f"calm-{index}") for index in range(3)]
    for worker in calm[:2]:
        quality_judge(worker, item, dict.fromkeys(keys, 4))
    outlier = quality_worker(campaign, "5e7a11ce0ddba11f00d5eed4")
    quality_judge(outlier, item, dict.fromkeys(keys, 1))
    qc_campaign_full(campaign=campaign)
    item.refresh_from_db()
    assert item.review_state == "open" and ReviewItem.objects.filter(campaign=campaign).count() == 1
    assert item.kept_judgments == 3 and item.is_finalised

    participant_erase(worker=outlier.worker, actor=curator, requested_by="curator")

    item.refresh_from_db()
    assert ReviewItem.objects.filter(campaign=campaign).count() == 0
    assert item.review_state == "" and item.kept_judgments == 2 and not item.is_finalised
    assert item.overall == pytest.approx(4.0) and item.slots_taken == 2


def test_the_campaign_setting_is_validated_and_stated_in_the_consent_text(curator):
    campaign = crowd_campaign(slug="consent-text", clips=1, candidates_per_clip=1)
    client = APIClient()
    client.force_login(curator)
    detail = "/api/v1/campaigns/consent-text/"
    assert client.get(detail).json()["erasure_mode"] == "delete"
    bad = client.patch(detail, {"erasure_mode": "forget"}, format="json")
    assert bad.status_code == 400 and "erasure_mode" in bad.json()
    page = client.get("/w/consent-text/?PROLIFIC_PID=someone").content.decode()
    assert "your ratings are deleted." in " ".join(page.split())
    ok = client.patch(detail, {"erasure_mode": "pseudonymise"}, format="json")
    assert ok.status_code == 200 and ok.json()["erasure_mode"] == "pseudonymise"
    campaign.refresh_from_db()
    assert campaign.erasure_mode == ErasureMode.PSEUDONYMISE
    page = client.get("/w/consent-text/?PROLIFIC_PID=someone").content.decode()
    assert "kept for the research under a random pseudonym" in " ".join(page.split())
    assert 'href="/w/consent-text/erase/"' in page  # the end screen's link


def test_a_standing_exclusion_that_names_the_worker_keeps_no_trace_under_a_pseudonym(curator):
    campaign = quality_crowd_campaign(
        slug="named", clips=1, candidates_per_clip=2, quota=2,
        erasure_mode=ErasureMode.PSEUDONYMISE,
    )  # fmt: skip
    person = quality_worker(campaign, PLATFORM_ID)
    for item in campaign.items.all():
        quality_judge(person, item, dict.fromkeys(campaign.question_keys, 3))
    qc_run_inline(campaign=campaign)
    worker_exclude(participation=person, actor=curator, reason=CURATOR_NOTE)
    qc_run_inline(campaign=campaign)
    assert _database_hits(PLATFORM_ID)  # judgments, flags, exclusion, run summary, worker

    participant_erase(worker=person.worker, actor=curator, requested_by="curator")

    assert _database_hits(PLATFORM_ID) == []
    person.refresh_from_db()
    assert person.status == ParticipationStatus.EXCLUDED  # still out of the campaign's data
    reasons = set(Judgment.objects.values_list("exclusion_reason", flat=True))
    assert reasons == {"Excluded by a curator: copied answers, see worker [erased]"}


def test_a_form_post_without_the_setting_keeps_the_campaigns_erasure_mode():
    from annotation.admin import CampaignAdminForm
    from annotation.crowd.views.campaigns import CampaignSettingsForm

    campaign = crowd_campaign(
        slug="keeps-mode", clips=1, candidates_per_clip=1, erasure_mode=ErasureMode.PSEUDONYMISE
    )
    admin_form = CampaignAdminForm(instance=campaign)
    admin_form.cleaned_data = {"erasure_mode": ""}
    assert admin_form.clean()["erasure_mode"] == ErasureMode.PSEUDONYMISE
    admin_form.cleaned_data = {"erasure_mode": ErasureMode.DELETE}
    assert admin_form.clean()["erasure_mode"] == ErasureMode.DELETE
    # the other settings a post may leave out, the same way
    admin_form.cleaned_data = {"retest_share": None, "retest_min_gap": ""}
    kept = admin_form.clean()
    assert (kept["retest_share"], kept["retest_min_gap"]) == (
        campaign.retest_share,
        campaign.retest_min_gap,
    )
    assert CampaignSettingsForm.base_fields["erasure_mode"].required is False
