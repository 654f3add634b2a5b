"""Backup and restore (`manage.py backup` / `restore`, common.backup), drilled on real PostgreSQL and
the loopback S3 server: a full flow (an import, crowd work, QC, review, a calibration, a release, a
training run), a backup, a restore into a second database and a second bucket, and then everything
read back identical and the crowd going on without a slot counted twice.

pg_dump reads committed rows from its own connection, so these tests commit (transactional_db).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
import psycopg2
import pytest
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from annotation.figures import campaign_figures
from annotation.imports import vatex_eval_import
from annotation.models import Campaign, CampaignCandidate, Judgment, ReviewItem
from annotation.quality.agreement import campaign_agreement
from annotation.quality.calibration_job import calibration_run_inline
from annotation.quality.review import review_resolve
from annotation.quality.run import qc_campaign_full
from annotation.quality.selectors import audit_entries, review_queue_summary
from annotation.selectors import platform_stats
from common import storage
from common.backup import BackupError, postgres_tool, postgres_tools
from common.models import JobStatus
from datasets_app.models import Clip
from datasets_app.selectors import dataset_stats
from export.models import Release
from export.services import release_verify
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign, crowd_join
from tests.export.helpers import build
from tests.hardening.world import NEXT, submit_url, worker_client
from tests.rigel.release_support import jpeg
from training_bridge.models import TrainingRun
from training_bridge.store import DjangoStore

pytestmark = pytest.mark.django_db(transaction=True)

VATEX_EVAL_FILE = Path(settings.BASE_DIR) / "data" / "vatex_eval" / "vid_cans_score_dict.json"


def run_command(name: str, *arguments: str) -> dict[str, Any]:
    out = StringIO()
    call_command(name, *arguments, "--json", stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A second, empty database on the same server, dropped afterwards."""
    name = f"{connection.settings_dict['NAME']}_restored"
    admin = psycopg2.connect(**{**connection.get_connection_params(), "dbname": "postgres"})
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        cursor.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield name
    finally:
        connection.close()
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


@contextmanager
def using_database(name: str) -> Iterator[None]:
    """This process's Django connection on database `name` (the test database again afterwards,
    so pytest-django flushes the right one)."""
    original = connection.settings_dict["NAME"]
    connection.close()
    connection.settings_dict["NAME"] = name
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["NAME"] = original


def second_bucket(s3_server: str, settings) -> str:  # type: ignore[no-untyped-def]
    import uuid

    import boto3

    from tests.support.storage import point_storage_at_s3

    bucket = f"lepus-restored-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    point_storage_at_s3(settings, s3_server, bucket)
    return bucket


# --- the full flow ------------------------------------------------------------------------------


@dataclasses.dataclass
class Flow:
    campaign: Campaign
    imported: Campaign
    token_late: str  # a worker holding a live, unsubmitted assignment at backup time
    live_offer: dict[str, Any]
    release: Release
    run: TrainingRun


def _offer(client) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    answer = client.post(NEXT)
    assert answer.status_code == 200, answer.content
    return answer.json()


def _submit(client, offer: dict[str, Any], value: int) -> int:  # type: ignore[no-untyped-def]
    answer = client.post(
        submit_url(offer["assignment_id"]),
        {"ratings": all_candidate_ratings(offer, value=value, reason="seen it all")},
        content_type="application/json",
    )
    return answer.status_code


def build_full_flow(curator) -> Flow:  # type: ignore[no-untyped-def]
    vatex_eval_import(path=VATEX_EVAL_FILE, limit=3)
    imported = Campaign.objects.get(slug="vatex-eval")
    assert (
        Judgment.objects.filter(campaign=imported).count() == 3 * 6 * 3
    )  # 6 captions a clip, 3 raters a caption

    # Three clips of two slots: two raters far apart (QC acts on a pattern only from three clips
    # on, so both are kept) overlap on at least one clip, which goes to the review queue; a third
    # worker holds a live assignment at backup time; one slot stays open.
    campaign = crowd_campaign(
        clips=3, candidates_per_clip=2, judgments_per_candidate=2, slug="drill"
    )
    for external_id, value in (("drill-a", 1), ("drill-b", 5)):
        token, _ = crowd_join(campaign, external_id)
        client = worker_client(token)
        for _ in range(2):
            assert _submit(client, _offer(client), value) == 201
    token_late, _ = crowd_join(campaign, "drill-late")
    live_offer = _offer(worker_client(token_late))

    for each in (campaign, imported):
        qc_campaign_full(campaign=each)
    item = ReviewItem.objects.filter(campaign=campaign).order_by("pk").first()
    assert item is not None, "the far-apart ratings gave no review item"
    review_resolve(item=item, user=curator, ratings={"relevance": 3}, note="resolved in the drill")
    calibration = calibration_run_inline(campaign=imported)
    assert calibration.status == JobStatus.SUCCEEDED, calibration.error

    store = DjangoStore()
    rng = np.random.default_rng(0)
    for clip in Clip.objects.all():
        clip.frames_key = f"clips/{clip.vatex_id}/frames"
        for index in range(4):
            store.put_bytes(f"{clip.frames_key}/{index:03d}.jpg", jpeg(rng))
        clip.frame_count, clip.duration = 4, 10.0
        clip.save(update_fields=["frames_key", "frame_count", "duration"])
    release = build(campaigns=[campaign, imported], seed=3, ratios=[0.6, 0.4])
    trained = run_command(
        "train", "--release", str(release.pk), "--backbone", "tiny", "--inline",
        "--ablation", "phase1_only", "--set", "frames=4", "--set", "phase1_epochs=1",
        "--set", 'standard_metrics=["bleu4"]',
    )  # fmt: skip
    assert trained["status"] == "succeeded"
    return Flow(
        campaign=campaign,
        imported=imported,
        token_late=token_late,
        live_offer=live_offer,
        release=release,
        run=TrainingRun.objects.get(pk=trained["run"]),
    )


def observed() -> dict[str, Any]:
    """Everything the drill compares, read through the product's own selectors."""
    campaigns = {}
    for campaign in Campaign.objects.order_by("slug"):
        campaigns[campaign.slug] = {
            "figures": dataclasses.asdict(campaign_figures(campaign=campaign)),
            "agreement": campaign_agreement(campaign=campaign),
            "review_queue": review_queue_summary(campaign=campaign),
            "audit": list(
                audit_entries(campaign=campaign).values(
                    "pk", "action", "target", "before", "after", "note", "actor_id", "created_at"
                )
            ),
        }
    return {
        "rows": {model._meta.label: model._default_manager.count() for model in apps.get_models()},
        "campaigns": campaigns,
        "platform": platform_stats(),
        "dataset": dataset_stats(),
        "releases": {
            release.pk: {"files": release.files, "verify": release_verify(release=release)}
            for release in Release.objects.order_by("pk")
        },
        "training": list(
            TrainingRun.objects.order_by("pk").values("pk", "status", "metrics", "evaluation")
        ),
        "objects": {
            key: hashlib.sha256(storage.read_bytes(key)).hexdigest() for key in storage.every_key()
        },
    }


def test_the_restore_drill_after_a_full_flow(  # type: ignore[no-untyped-def]
    s3_storage, s3_server, settings, curator, empty_database, tmp_path
):
    flow = build_full_flow(curator)
    before = observed()
    assert before["releases"][flow.release.pk]["verify"] == {"ok": True, "mismatches": []}
    assert before["campaigns"]["drill"]["audit"], "the review left no audit entry"
    assert before["campaigns"]["drill"]["review_queue"]["resolved"] == 1

    backup = tmp_path / "backup"
    made = run_command("backup", str(backup))
    manifest = json.loads((backup / "manifest.json").read_text())
    assert made["objects"]["count"] == len(before["objects"]) == len(manifest["storage"]["objects"])
    assert made["database"]["rows"] == sum(manifest["database"]["tables"].values())
    assert manifest["database"]["tables"]["public.annotation_judgment"] == Judgment.objects.count()

    second_bucket(s3_server, settings)
    with using_database(empty_database):
        restored = run_command("restore", str(backup))
        assert restored["migrations_pending"] == []
        assert restored["objects"] == made["objects"]
        after = observed()
        assert after == before

        # The crowd goes on: the late worker's token and live assignment survived; the submit is
        # stored once, with ids after every restored one (the sequences came with the dump); a
        # new worker gets the one open slot and then nothing, and no candidate has more than its
        # quota.
        last_judgment = Judgment.objects.order_by("-pk").values_list("pk", flat=True).first()
        late = worker_client(flow.token_late)
        assert _submit(late, flow.live_offer, 3) == 201
        stored = Judgment.objects.count()
        assert _submit(late, flow.live_offer, 3) == 200  # a replay: acknowledged, stored once
        assert Judgment.objects.count() == stored
        newcomer = worker_client(crowd_join(Campaign.objects.get(slug="drill"), "drill-new")[0])
        assert _submit(newcomer, _offer(newcomer), 2) == 201
        assert newcomer.post(NEXT).status_code == 204
        added = Judgment.objects.filter(pk__gt=last_judgment)
        assert added.count() == 2 * 2  # two clips of two candidates
        figures = campaign_figures(campaign=Campaign.objects.get(slug="drill"))
        assert figures.judgments == (
            before["campaigns"]["drill"]["figures"]["judgments"] + added.count()
        )
        quota = flow.campaign.judgments_per_candidate
        for item in CampaignCandidate.objects.filter(campaign__slug="drill"):
            assert Judgment.objects.filter(campaign_candidate=item).count() == quota
        assert Judgment.objects.count() == before["rows"]["annotation.Judgment"] + added.count()


# --- refusals -----------------------------------------------------------------------------------


def _small_backup(tmp_path: Path) -> Path:
    storage.put_bytes("clips/one/video.mp4", b"video bytes")
    storage.put_bytes("releases/9/data/train.jsonl", b'{"a": 1}\n')
    backup = tmp_path / "backup"
    run_command("backup", str(backup))
    return backup


def test_restore_refuses_a_file_that_differs_from_the_manifest_and_names_it(tmp_path, curator):
    backup = _small_backup(tmp_path)
    target = backup / "objects" / "releases" / "9" / "data" / "train.jsonl"
    target.write_bytes(b'{"a": 2}\n')
    with pytest.raises(CommandError, match=r"objects/releases/9/data/train\.jsonl does not match"):
        run_command("restore", str(backup))
    target.write_bytes(b'{"a": 1}\n')
    (backup / "objects" / "planted.txt").write_bytes(b"not from the backup")
    with pytest.raises(CommandError, match=r"objects/planted\.txt is in the backup but not in"):
        run_command("restore", str(backup))
    (backup / "objects" / "planted.txt").unlink()
    dump = backup / "database.dump"
    damaged = bytearray(dump.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    dump.write_bytes(bytes(damaged))
    with pytest.raises(CommandError, match=r"database\.dump does not match the manifest"):
        run_command("restore", str(backup))
    (backup / "manifest.json").unlink()
    with pytest.raises(CommandError, match=r"manifest\.json is missing"):
        run_command("restore", str(backup))


def test_restore_refuses_a_database_or_storage_that_is_not_empty(  # type: ignore[no-untyped-def]
    tmp_path, curator, empty_database, settings
):
    backup = _small_backup(tmp_path)
    users = curator.__class__.objects.count()
    with pytest.raises(CommandError, match=r"database '.*' is not empty"):
        run_command("restore", str(backup))
    assert curator.__class__.objects.count() == users

    with using_database(empty_database):
        with pytest.raises(CommandError, match=r"storage .* is not empty \(it holds 'clips/one"):
            run_command("restore", str(backup))
        assert public_tables() == 0

        emptied = tmp_path / "emptied"
        emptied.mkdir()
        settings.STORAGES = {
            **settings.STORAGES,
            "default": {**settings.STORAGES["default"], "OPTIONS": {"location": str(emptied)}},
        }
        checked = run_command("restore", str(backup), "--dry-run")
        assert checked["dry_run"] is True and checked["verified_files"] == 3
        assert public_tables() == 0
        restored = run_command("restore", str(backup))
        assert restored["objects"] == {"count": 2, "bytes": len(b"video bytes") + 9}
        assert storage.read_bytes("clips/one/video.mp4") == b"video bytes"
        assert curator.__class__.objects.get().username == "curator"


def public_tables() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db
def test_backup_wants_a_new_or_empty_folder(tmp_path, settings):  # type: ignore[no-untyped-def]
    used = tmp_path / "used"
    used.mkdir()
    (used / "old.txt").write_text("something")
    with pytest.raises(CommandError, match="is not an empty folder"):
        run_command("backup", str(used))
    assert sorted(path.name for path in used.iterdir()) == ["old.txt"]
    inside = Path(settings.MEDIA_ROOT) / "backups" / "today"
    with pytest.raises(CommandError, match="is inside the storage it would copy"):
        run_command("backup", str(inside))
    assert not inside.exists()


@pytest.mark.django_db
def test_the_pg_dump_chosen_is_the_oldest_that_can_read_the_server():
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version_num")
        server_major = int(cursor.fetchone()[0]) // 10000
    chosen = postgres_tool("pg_dump", at_least=server_major)
    assert chosen.major >= server_major
    newer_than_needed = [
        tool for tool in postgres_tools("pg_dump") if server_major <= tool.major < chosen.major
    ]
    assert newer_than_needed == []
    with pytest.raises(BackupError, match=r"no pg_restore of PostgreSQL 99 or newer .*found: /"):
        postgres_tool("pg_restore", at_least=99)


def test_a_column_and_a_table_no_code_lists_are_carried(  # type: ignore[no-untyped-def]
    tmp_path, curator, empty_database, settings
):
    """The dump is of the whole database: what another change adds (a column, a table) comes
    along without a line here."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE auth_user ADD COLUMN backup_probe text DEFAULT 'carried'")
        cursor.execute("CREATE TABLE backup_probe_extra (id serial PRIMARY KEY, note text)")
        cursor.execute("INSERT INTO backup_probe_extra (note) VALUES ('one'), ('two')")
    try:
        backup = tmp_path / "backup"
        made = run_command("backup", str(backup))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE auth_user DROP COLUMN backup_probe")
            cursor.execute("DROP TABLE backup_probe_extra")
    tables = json.loads((backup / "manifest.json").read_text())["database"]["tables"]
    assert tables["public.backup_probe_extra"] == 2
    assert made["database"]["tables"] == len(tables)

    emptied = tmp_path / "emptied"
    emptied.mkdir()
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {**settings.STORAGES["default"], "OPTIONS": {"location": str(emptied)}},
    }
    with using_database(empty_database):
        run_command("restore", str(backup))
        with connection.cursor() as cursor:
            cursor.execute("SELECT username, backup_probe FROM auth_user")
            assert cursor.fetchall() == [("curator", "carried")]
            cursor.execute("SELECT note FROM backup_probe_extra ORDER BY id")
            assert cursor.fetchall() == [("one",), ("two",)]
            # The serial's sequence came along too: the next row continues after the restored ones.
            cursor.execute("INSERT INTO backup_probe_extra (note) VALUES ('three') RETURNING id")
            assert cursor.fetchone()[0] == 3
