"""Uploads of the import page, run in this process (the Celery path is in test_uploads_worker.py):
each kind imports through its command's importer; a refused file fails the job with the command's
own file/line/field message and writes nothing; the upload checks (kind, name, size, campaign);
the API; and the archive unpacker's refusals (path traversal, links, zip bombs, member counts)."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from annotation.imports.uploads import (
    UploadRefused,
    import_upload_create,
    import_upload_from_path,
    import_upload_retry,
    import_upload_run,
)
from annotation.models import ImportUpload, UploadKind
from common import storage
from common.models import JobStatus
from datasets_app.models import ClipStatus
from datasets_app.services.imports import ImportRejected
from datasets_app.services.imports.archives import ArchiveLimits, archive_unpack
from tests.annotation.imports.upload_support import row_counts, write_bad_judgments
from tests.datasets_app.helpers import EXAMPLES, refused, run_command

pytestmark = pytest.mark.django_db


def _run(job: ImportUpload) -> ImportUpload:
    import_upload_run(job_id=job.pk)
    job.refresh_from_db()
    return job


def test_every_kind_imports_with_the_commands_result(curator, tmp_path):
    steps = [
        (UploadKind.VATEX, "vatex.json", ""),
        (UploadKind.CANDIDATES, "candidates.jsonl", ""),
        (UploadKind.JUDGMENTS, "judgments.jsonl", "example-crowd"),
        (UploadKind.VATEX_EVAL, "vatex_eval.json", ""),
    ]
    for kind, name, campaign in steps:
        job = _run(
            import_upload_from_path(
                kind=kind, path=EXAMPLES / name, user=curator, campaign_slug=campaign
            )
        )
        assert (job.status, job.error, job.rejection, job.progress) == (
            JobStatus.SUCCEEDED,
            "",
            {},
            1.0,
        ), job.error
        assert job.result["file"] == name
        assert job.result["already_imported"] is False
        assert storage.read_bytes(job.storage_key) == (EXAMPLES / name).read_bytes()
    # The same files through the commands are already imported: the upload wrote them.
    again = run_command(
        "import_judgments", str(EXAMPLES / "judgments.jsonl"), "--campaign", "example-crowd"
    )
    assert again["already_imported"] is True
    assert again["batch_id"] == ImportUpload.objects.get(kind="judgments").result["batch_id"]


def test_a_refused_file_writes_nothing_and_says_what_the_command_says(
    curator, tmp_path, monkeypatch
):
    run_command("import_candidates", str(EXAMPLES / "candidates.jsonl"))
    bad = write_bad_judgments(tmp_path)
    before = row_counts()

    job = _run(
        import_upload_from_path(
            kind=UploadKind.JUDGMENTS, path=bad, user=curator, campaign_slug="crowd-1"
        )
    )

    assert row_counts() == before
    assert job.status == JobStatus.FAILED
    monkeypatch.chdir(tmp_path)  # the command given the bare file name words it the same way
    message, payload = refused("import_judgments", Path(bad.name), "--campaign", "crowd-1")
    assert job.error == message
    assert job.rejection == {
        "ok": False,
        "error": message,
        "file": "judgments-bad.csv",
        "line": payload["line"],
        "column": payload["column"],
        "field": payload["field"],
        "message": job.rejection["message"],
    }
    assert payload["line"] == 4 and payload["field"] == "overall"
    assert message.startswith('judgments-bad.csv, line 4, field "overall": ')
    assert message.endswith(job.rejection["message"])

    # Fixed in place and imported again: the stored file is the same, so it is refused again.
    job = import_upload_retry(job_id=job.pk)
    assert (job.status, job.rejection, job.error) == (JobStatus.QUEUED, {}, "")
    assert _run(job).error == message


@pytest.mark.parametrize(
    ("kind", "name", "size", "campaign", "file_format", "field"),
    [
        ("nonsense", "a.csv", 10, "", "", "kind"),
        (UploadKind.CANDIDATES, "a.txt", 10, "", "", "file"),
        (UploadKind.VATEX, "a.jsonl", 10, "", "", "file"),
        (UploadKind.VIDEOS, "clips.rar", 10, "", "", "file"),
        (UploadKind.CANDIDATES, "a.csv", 0, "", "", "file"),
        (UploadKind.JUDGMENTS, "a.csv", 10, "", "", "campaign"),
        (UploadKind.JUDGMENTS, "a.csv", 10, "Not A Slug", "", "campaign"),
        (UploadKind.CANDIDATES, "a.csv", 10, "crowd", "", "campaign"),
        (UploadKind.VATEX, "a.json", 10, "", "csv", "file_format"),
    ],
)
def test_unacceptable_uploads_are_refused_before_anything_is_stored(
    curator, kind, name, size, campaign, file_format, field
):
    upload = SimpleUploadedFile(name, b"x" * size)
    with pytest.raises(UploadRefused) as caught:
        import_upload_create(
            kind=kind, upload=upload, user=curator, campaign_slug=campaign, file_format=file_format
        )
    assert caught.value.field == field
    assert ImportUpload.objects.count() == 0
    assert storage.list_keys("imports") == []


def test_an_upload_over_the_limit_is_refused(curator, settings):
    settings.LEPUS_MAX_UPLOAD_BYTES = 1024
    with pytest.raises(UploadRefused, match="over the upload limit of 1024 bytes"):
        import_upload_create(
            kind=UploadKind.CANDIDATES,
            upload=SimpleUploadedFile("a.csv", b"x" * 1025),
            user=curator,
        )


def test_the_uploaded_name_is_cleaned_before_it_becomes_a_key(curator):
    job = import_upload_create(
        kind=UploadKind.VATEX,
        upload=SimpleUploadedFile("../../etc/ a b;.json", (EXAMPLES / "vatex.json").read_bytes()),
        user=curator,
    )
    assert job.file_name == "a_b_.json"
    assert job.storage_key.startswith("imports/") and job.storage_key.endswith("/a_b_.json")


# --- API -----------------------------------------------------------------------------------------


def test_the_api_creates_an_upload_and_reports_its_job(
    curator_client, django_capture_on_commit_callbacks
):
    with (
        (EXAMPLES / "candidates.csv").open("rb") as handle,
        django_capture_on_commit_callbacks(execute=False) as callbacks,
    ):
        response = curator_client.post(
            "/api/v1/imports/", {"kind": "candidates", "file": handle}, format="multipart"
        )
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["kind"], body["file_name"], body["status"], body["rejection"]) == (
        "candidates",
        "candidates.csv",
        "queued",
        None,
    )
    assert len(callbacks) == 1  # the task is published after commit
    job = _run(ImportUpload.objects.get(pk=body["id"]))
    detail = curator_client.get(f"/api/v1/imports/{job.pk}/").json()
    assert (detail["status"], detail["progress"], detail["result"]) == (
        "succeeded",
        1.0,
        job.result,
    )
    assert [row["id"] for row in curator_client.get("/api/v1/imports/").json()] == [job.pk]


def test_the_api_refuses_bad_uploads_by_field(curator_client, settings):
    response = curator_client.post(
        "/api/v1/imports/", {"kind": "judgments", "file": SimpleUploadedFile("j.csv", b"a")}
    )
    assert response.status_code == 400
    assert "campaign" in response.json()
    settings.LEPUS_MAX_UPLOAD_BYTES = 1024
    response = curator_client.post(
        "/api/v1/imports/",
        {"kind": "candidates", "file": SimpleUploadedFile("c.csv", b"x" * 200_000)},
    )
    assert response.status_code == 413
    assert ImportUpload.objects.count() == 0


def test_the_page_refuses_an_oversize_body_before_reading_it(curator_client, settings):
    settings.LEPUS_MAX_UPLOAD_BYTES = 1024
    response = curator_client.post(
        "/dashboard/datasets/imports/",
        {"kind": "candidates", "file": SimpleUploadedFile("c.csv", b"x" * 200_000)},
    )
    assert response.status_code == 413
    assert "over the upload limit" in response.content.decode()
    assert ImportUpload.objects.count() == 0


# --- Archives -------------------------------------------------------------------------------------


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _unpack(path: Path, tmp_path: Path, **limits: int) -> list[str]:
    destination = tmp_path / "out"
    destination.mkdir(exist_ok=True)
    found = archive_unpack(
        path=path,
        destination=destination,
        limits=ArchiveLimits(
            **{"members": 100, "unpacked_bytes": 10_000_000, "seconds": 60.0, **limits}
        ),
    )
    return sorted(file.name for file in found.files)


def _refusal(path: Path, tmp_path: Path, **limits: int) -> ImportRejected:
    with pytest.raises(ImportRejected) as caught:
        _unpack(path, tmp_path, **limits)
    assert list((tmp_path / "out").iterdir()) == []  # nothing left behind
    return caught.value


def test_a_good_archive_unpacks_flat_and_skips_hidden_files(tmp_path):
    path = _zip(
        tmp_path / "clips.zip",
        {"a/one.mp4": b"1", "two.mp4": b"22", "__MACOSX/._two.mp4": b"x", ".DS_Store": b"x"},
    )
    assert _unpack(path, tmp_path) == ["one.mp4", "two.mp4"]
    assert (tmp_path / "out" / "two.mp4").read_bytes() == b"22"


def test_paths_that_leave_the_folder_are_refused(tmp_path):
    for name in ("../evil.mp4", "a/../../evil.mp4", "/etc/evil.mp4", "C:/evil.mp4", "a\\..\\b.mp4"):
        error = _refusal(_zip(tmp_path / "bad.zip", {"ok.mp4": b"1", name: b"x"}), tmp_path)
        assert error.file == "bad.zip" and error.field == name
    assert not (tmp_path / "evil.mp4").exists()


def test_links_in_zip_and_tar_are_refused(tmp_path):
    path = tmp_path / "link.zip"
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo("clip.mp4")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    assert "symbolic link" in _refusal(path, tmp_path).message

    for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        path = tmp_path / f"link-{kind!r}.tar"
        with tarfile.open(path, "w") as archive:
            info = tarfile.TarInfo("clip.mp4")
            info.type, info.linkname = kind, "/etc/passwd"
            archive.addfile(info)
        assert "link" in _refusal(path, tmp_path).message

    path = tmp_path / "fifo.tar"
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("clip.mp4")
        info.type = tarfile.FIFOTYPE
        archive.addfile(info)
    assert "not a regular file" in _refusal(path, tmp_path).message


def test_a_zip_bomb_stops_at_the_unpacked_limit_whatever_the_headers_say(tmp_path):
    path = _zip(tmp_path / "bomb.zip", {"big.mp4": bytes(5_000_000)})
    assert path.stat().st_size < 20_000  # five megabytes of zeros compress to almost nothing
    error = _refusal(path, tmp_path, unpacked_bytes=1_000_000)
    assert "unpacks to more than 1000000 bytes" in error.message
    # Lying headers: the declared size says 10 bytes; the limit counts what decompression yields.
    data = bytearray(path.read_bytes())
    for marker in (b"PK\x03\x04", b"PK\x01\x02"):
        offset = data.find(marker)
        size_at = offset + (22 if marker == b"PK\x03\x04" else 24)
        data[size_at : size_at + 4] = (10).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(ImportRejected):
        _unpack(path, tmp_path, unpacked_bytes=1_000_000)


def test_too_many_members_and_twin_names_are_refused(tmp_path):
    path = _zip(tmp_path / "many.zip", {f"c{index}.mp4": b"1" for index in range(6)})
    assert "more than 5 entries" in _refusal(path, tmp_path, members=5).message
    path = _zip(tmp_path / "twins.zip", {"a/c.mp4": b"1", "b/c.mp4": b"2"})
    assert "a second file named c.mp4" in _refusal(path, tmp_path).message


def test_a_tar_unpacks_and_garbage_is_not_an_archive(tmp_path):
    path = tmp_path / "clips.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo("clips/one.mp4")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    assert _unpack(path, tmp_path) == ["one.mp4"]
    garbage = tmp_path / "fake.zip"
    garbage.write_bytes(os.urandom(64))
    assert _refusal(garbage, tmp_path).message == "not a zip or tar archive"


def test_a_video_archive_queues_video_jobs_for_the_clips_it_names(curator, tmp_path):
    from datasets_app.models import Clip, VideoAttachJob
    from datasets_app.services.imports import vatex_import

    vatex_import(path=EXAMPLES / "vatex.json")
    clip = Clip.objects.order_by("vatex_id").first()
    assert clip is not None
    archive = _zip(
        tmp_path / "clips.zip",
        {f"videos/{clip.vatex_id}.mp4": b"not really a video", "stray.mp4": b"1"},
    )

    job = _run(import_upload_from_path(kind=UploadKind.VIDEOS, path=archive, user=curator))

    assert job.status == JobStatus.SUCCEEDED, job.error
    video_job = VideoAttachJob.objects.get()
    assert job.result["job_ids"] == [video_job.pk]
    assert (job.result["matched_clips"], job.result["unmatched_files"]) == (1, 1)
    clip.refresh_from_db()
    assert clip.status == ClipStatus.QUEUED
    assert storage.read_bytes(clip.source_key) == b"not really a video"


def test_a_refused_archive_writes_nothing(curator, tmp_path):
    from datasets_app.services.imports import vatex_import

    vatex_import(path=EXAMPLES / "vatex.json")
    before = row_counts()
    archive = _zip(tmp_path / "evil.zip", {"ok.mp4": b"1", "../../evil.mp4": b"x"})

    job = _run(import_upload_from_path(kind=UploadKind.VIDEOS, path=archive, user=curator))

    assert row_counts() == before
    assert (
        job.error
        == "evil.zip, field \"../../evil.mp4\": the member's path leaves the archive's folder (..)"
    )
    assert storage.list_keys("sources") == []

    nothing = _zip(tmp_path / "none.zip", {"unknown_clip.mp4": b"1"})
    job = _run(import_upload_from_path(kind=UploadKind.VIDEOS, path=nothing, user=curator))
    assert job.status == JobStatus.FAILED
    assert "none of its 1 video files is named after a stored clip" in job.error
    assert row_counts() == before
