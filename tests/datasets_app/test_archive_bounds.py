"""Issue 25, finding 5: an uploaded archive is bounded in every dimension, not only in files.

A 4.8 MB tar.gz of 1,000,000 directory entries was accepted (78 s, the Celery child grew from 174
to 599 MiB, linearly): folders did not count toward the member limit and tarfile kept every header
it had read. Now every entry counts, no header is kept, no single read of a tar stream may be
larger than `MAX_READ_BYTES`, a zip's central directory is sized before zipfile reads it, and the
whole unpacking runs against a clock (LEPUS_ARCHIVE_MAX_SECONDS). The replay through the real
server and Celery worker is in tests/hardening/test_bounds_server.py.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from datasets_app.services.imports import ImportRejected
from datasets_app.services.imports.archives import (
    MAX_READ_BYTES,
    ArchiveLimits,
    archive_unpack,
)
from tests.support.hostile_files import directory_bomb

DEFAULT_MEMBERS = 20000  # LEPUS_ARCHIVE_MAX_MEMBERS's default (config/settings.py)


def _limits(**overrides: float) -> ArchiveLimits:
    values: dict[str, float] = {
        "members": DEFAULT_MEMBERS,
        "unpacked_bytes": 10_000_000,
        "seconds": 60.0,
    }
    values.update(overrides)
    return ArchiveLimits(
        members=int(values["members"]),
        unpacked_bytes=int(values["unpacked_bytes"]),
        seconds=values["seconds"],
    )


def _refusal(path: Path, tmp_path: Path, limits: ArchiveLimits) -> ImportRejected:
    destination = tmp_path / "out"
    destination.mkdir(exist_ok=True)
    with pytest.raises(ImportRejected) as caught:
        archive_unpack(path=path, destination=destination, limits=limits)
    assert list(destination.iterdir()) == []  # nothing left behind
    return caught.value


def test_a_million_folders_are_refused_fast_in_bounded_memory(tmp_path):
    bomb = directory_bomb(tmp_path / "folders.tar.gz", entries=1_000_000)
    assert bomb.stat().st_size < 8_000_000  # the size of the probe's 4.8 MB file

    tracemalloc.start()
    started = time.monotonic()
    try:
        error = _refusal(bomb, tmp_path, _limits())
        seconds = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert error.message == (
        f"the archive holds more than {DEFAULT_MEMBERS} entries, folders included "
        "(LEPUS_ARCHIVE_MAX_MEMBERS)"
    )
    assert error.field == "folder00000"  # the 20,001st entry opens the third block
    # Generous bounds (before the fix: 78 s and 425 MiB more for the whole archive); the refusal
    # reads 20,001 headers, about 10 MB of tar, and keeps none of them.
    print(f"refused in {seconds:.2f} s, peak {peak / 2**20:.1f} MiB traced")
    assert seconds < 20, seconds
    assert peak < 32 * 1024 * 1024, peak


def test_folders_and_hidden_files_count_in_a_zip_too(tmp_path):
    path = tmp_path / "folders.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for index in range(4):
            archive.writestr(f"folder{index}/", b"")
        archive.writestr(".DS_Store", b"x")
        archive.writestr("one.mp4", b"1")
    error = _refusal(path, tmp_path, _limits(members=5))
    assert error.message == (
        "the archive holds more than 5 entries, folders included (LEPUS_ARCHIVE_MAX_MEMBERS)"
    )
    assert error.field == "6 entries"  # from the end record, before zipfile lists them

    # An end record that lies (2 entries): zipfile reads the directory to its end regardless,
    # and the entries are counted one by one as they come.
    data = bytearray(path.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    data[end + 8 : end + 12] = (2).to_bytes(2, "little") * 2
    path.write_bytes(bytes(data))
    error = _refusal(path, tmp_path, _limits(members=5))
    assert "more than 5 entries, folders included" in error.message
    assert error.field == "one.mp4"


def test_a_zip_whose_directory_declares_too_many_entries_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for index in range(30):
            archive.writestr(f"folder{index}/", b"")
    error = _refusal(path, tmp_path, _limits(members=10))
    assert error.field == "30 entries"
    assert "more than 10 entries" in error.message


def test_a_zip_with_an_oversized_central_directory_is_refused(tmp_path):
    path = tmp_path / "long-names.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a" * 3000 + ".mp4", b"1")
    error = _refusal(path, tmp_path, _limits(members=2))
    assert "larger than 1024 bytes for each of the 2 entries allowed" in error.message


def test_a_tar_header_claiming_gigabytes_is_refused_without_reading_it(tmp_path):
    # A GNU long-name header whose size says 3 GiB: tarfile reads such a header whole.
    info = tarfile.TarInfo("././@LongLink")
    info.type = tarfile.GNUTYPE_LONGNAME
    info.size = 3 * 1024**3
    path = tmp_path / "long-name.tar.gz"
    path.write_bytes(gzip.compress(info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(4096)))

    tracemalloc.start()
    try:
        error = _refusal(path, tmp_path, _limits())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert f"a read of more than {MAX_READ_BYTES} bytes at once" in error.message
    assert peak < 32 * 1024 * 1024, peak


def test_unpacking_stops_at_the_time_limit(tmp_path):
    path = tmp_path / "clips.tar"
    with tarfile.open(path, "w") as archive:
        for index in range(3):
            info = tarfile.TarInfo(f"clip{index}.mp4")
            info.size = 1
            archive.addfile(info, io.BytesIO(b"1"))
    error = _refusal(path, tmp_path, _limits(seconds=0.0))
    assert error.message == ("unpacking the archive took more than 0 s (LEPUS_ARCHIVE_MAX_SECONDS)")


def test_a_good_tar_gz_still_unpacks(tmp_path):
    path = tmp_path / "clips.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        archive.addfile(_directory_info("clips/"))
        for index in range(3):
            info = tarfile.TarInfo(f"clips/clip{index}.mp4")
            info.size = 2
            archive.addfile(info, io.BytesIO(b"%02d" % index))
    destination = tmp_path / "out"
    destination.mkdir()
    found = archive_unpack(path=path, destination=destination, limits=_limits(members=4))
    assert sorted(file.name for file in found.files) == ["clip0.mp4", "clip1.mp4", "clip2.mp4"]
    assert (destination / "clip2.mp4").read_bytes() == b"02"
    assert found.bytes == 6


def _directory_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info
