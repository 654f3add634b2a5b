"""One download of a whole release (a zip streamed from storage, here moto's S3 on loopback), the
human labels of the reasons a candidate was left out, and the licence of every source in the
dataset card, the manifest and the release page."""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile

import pytest
from django.urls import reverse
from django.utils import timezone

from common import storage
from common.models import JobStatus
from export.download import CHUNK, release_zip_folder, release_zip_stream
from export.models import Release
from export.services import release_verify
from tests.export.builders import build_campaign
from tests.export.helpers import build, read_file
from tests.export.test_card import card_front_matter_and_body

pytestmark = pytest.mark.django_db


def _zip_of(response) -> zipfile.ZipFile:  # type: ignore[no-untyped-def]
    assert response.streaming
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def test_the_whole_release_downloads_as_one_zip_equal_to_the_stored_files(
    s3_storage, curator_client
):
    data = build_campaign(slug="zipped", clips=8, workers=4)
    release = build(campaigns=[data.campaign], seed=3, name="zipped release")
    response = curator_client.get(reverse("export:download", args=[release.pk]))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    folder = release_zip_folder(release=release)
    assert folder == f"vid-lepus-{release.pk}-zipped-release"
    assert response["Content-Disposition"] == f'attachment; filename="{folder}.zip"'
    archive = _zip_of(response)
    assert archive.testzip() is None
    assert sorted(archive.namelist()) == sorted(f"{folder}/{name}" for name in release.files)
    manifest = json.loads(archive.read(f"{folder}/manifest.json"))
    for relative, sha256 in release.files.items():
        member = archive.read(f"{folder}/{relative}")
        assert member == read_file(release, relative)  # byte for byte, from the bucket
        assert hashlib.sha256(member).hexdigest() == sha256
        if relative != "manifest.json":
            assert manifest["files"][relative] == sha256
    assert release_verify(release=release)["ok"] is True


def test_the_zip_is_written_as_it_is_sent_a_chunk_at_a_time(db):
    """A 6 MiB file goes out in pieces of about one chunk: the response never holds the release."""
    payload = os.urandom(6 * CHUNK)
    storage.put_bytes("releases/streamed/big.parquet", payload)
    storage.put_bytes("releases/streamed/data/train.jsonl", b'{"a": 1}\n' * 200_000)
    release = Release.objects.create(
        name="streamed",
        ratios=[0.8, 0.2],
        status=JobStatus.SUCCEEDED,
        finished_at=timezone.now(),
        storage_prefix="releases/streamed",
        files={"big.parquet": "x", "data/train.jsonl": "y"},
    )
    pieces = list(release_zip_stream(release=release))
    assert len(pieces) >= 6
    assert max(len(piece) for piece in pieces) <= CHUNK + 64 * 1024
    archive = zipfile.ZipFile(io.BytesIO(b"".join(pieces)))
    folder = release_zip_folder(release=release)
    assert archive.read(f"{folder}/big.parquet") == payload
    assert archive.getinfo(f"{folder}/big.parquet").compress_type == zipfile.ZIP_STORED
    assert archive.getinfo(f"{folder}/data/train.jsonl").compress_type == zipfile.ZIP_DEFLATED


def test_only_curators_download_and_only_published_releases(db, client, outsider, curator):
    failed = Release.objects.create(name="broken", ratios=[0.8, 0.2], status=JobStatus.FAILED)
    url = reverse("export:download", args=[failed.pk])
    assert client.get(url).status_code == 302  # to the login page
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    client.force_login(curator)
    assert client.get(url).status_code == 404


def test_the_card_lists_the_licence_of_every_source_and_the_curators_choice(db):
    data = build_campaign(slug="licensed", clips=6, workers=4)
    default = build(campaigns=[data.campaign], seed=1)
    assert default.judgments_license == "cc-by-4.0"
    front, body = card_front_matter_and_body(read_file(default, "README.md").decode())
    assert front["license"] == ["cc-by-4.0"]
    assert (
        "| judgments collected with Lepus (campaigns licensed) and this release's compilation "
        "| CC BY 4.0 (attribution) (`cc-by-4.0`) | the curators of this release |"
    ) in body
    # Lepus's code licence is named only as the code's.
    assert "BSD" not in body.replace(
        "licensed under the BSD 3-Clause Clear licence;\nthat is the code's licence, not this data's",
        "",
    )
    manifest = json.loads(read_file(default, "manifest.json"))
    assert manifest["license"] == ["cc-by-4.0"]
    assert [row["license"] for row in manifest["licenses"]] == ["cc-by-4.0"]

    chosen = build(campaigns=[data.campaign], seed=2, judgments_license="cc0-1.0")
    front, body = card_front_matter_and_body(read_file(chosen, "README.md").decode())
    assert front["license"] == ["cc0-1.0"]
    assert "CC0 1.0 (public domain dedication) (`cc0-1.0`)" in body


def test_the_release_page_names_reasons_and_licences_for_people(db, curator_client):
    data = build_campaign(slug="labels", clips=6, workers=4)
    release = build(campaigns=[data.campaign], seed=1)
    Release.objects.filter(pk=release.pk).update(
        counts={**release.counts, "excluded": {"below_quota": 3, "control": 2}}
    )
    page = curator_client.get(reverse("export:detail", args=[release.pk])).content.decode()
    assert (
        '<tr data-reason="below_quota"><th>Fewer kept judgments than the campaign asks for</th>'
        "<td>3</td></tr>"
    ) in page
    assert ">below_quota<" not in page and "below quota" not in page
    assert '<tr data-license="cc-by-4.0"><td>judgments collected with Lepus' in page
    assert 'data-field="judgments-license">CC BY 4.0 (attribution)</dd>' in page
    assert f'href="{reverse("export:download", args=[release.pk])}"' in page


def test_the_release_page_reads_the_manifests_licences_from_storage_once(
    db, curator_client, monkeypatch
):
    """A published manifest never changes: its licences are read from storage on the first view
    and cached under the manifest's sha256, not fetched again on every view."""
    from django.core.cache import cache

    data = build_campaign(slug="once", clips=4, workers=3)
    release = build(campaigns=[data.campaign], seed=2)
    cache.delete(f"lepus:release-licences:{release.pk}:{release.files['manifest.json']}")
    reads: list[str] = []
    original = storage.read_bytes

    def counting(key: str) -> bytes:
        reads.append(key)
        return original(key)

    monkeypatch.setattr(storage, "read_bytes", counting)
    url = reverse("export:detail", args=[release.pk])
    for _ in range(3):
        page = curator_client.get(url).content.decode()
        assert '<tr data-license="cc-by-4.0"><td>judgments collected with Lepus' in page
    assert [key for key in reads if key.endswith("manifest.json")] == [
        f"{release.storage_prefix}/manifest.json"
    ]
