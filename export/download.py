"""One download of a whole published release: a zip streamed from storage.

The zip is written as it is sent: each stored file is read in chunks of `CHUNK` bytes and
compressed into a sink that the response drains after every chunk, so the web process holds about
one chunk at a time, whatever the release's size (zipfile writes to a stream it cannot seek with
data descriptors after each member, and ZIP64 records for members past 4 GiB). Parquet is stored
as it is (already compressed); JSONL, CSV and the card are deflated. The members are the
release's files under one folder, byte for byte as stored, so `manifest.json` verifies them.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator

from common import storage
from export.models import Release

CHUNK = 1024 * 1024
STORED_AS_IS = (".parquet",)


class _Sink(io.RawIOBase):
    """A write-only, unseekable stream whose bytes are taken out with `drain`."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []
        self.pending = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        chunk = bytes(data)
        self._parts.append(chunk)
        self.pending += len(chunk)
        return len(chunk)

    def drain(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        self.pending = 0
        return data


def release_zip_folder(*, release: Release) -> str:
    """The zip's one top folder (and, with `.zip`, its file name): `vid-lepus-<id>-<name>`."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", release.name).strip("-.")[:80]
    return f"vid-lepus-{release.pk}" + (f"-{name}" if name else "")


def release_zip_stream(*, release: Release) -> Iterator[bytes]:
    """The zip of a published release's files, in pieces of about `CHUNK` bytes."""
    if not release.is_published:
        raise ValueError(f"release {release.pk} is not published")
    folder = release_zip_folder(release=release)
    stamp = (release.finished_at or release.created_at).timetuple()[:6]
    sink = _Sink()
    with zipfile.ZipFile(sink, mode="w", allowZip64=True) as archive:
        for relative in sorted(release.files):
            info = zipfile.ZipInfo(f"{folder}/{relative}", date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = (
                zipfile.ZIP_STORED if relative.endswith(STORED_AS_IS) else zipfile.ZIP_DEFLATED
            )
            with (
                storage.open_file(f"{release.storage_prefix}/{relative}") as source,
                archive.open(info, mode="w", force_zip64=True) as target,
            ):
                while chunk := source.read(CHUNK):
                    target.write(chunk)
                    if sink.pending >= CHUNK:
                        yield sink.drain()
            if sink.pending:
                yield sink.drain()
    yield sink.drain()  # the central directory, written when the archive closes
