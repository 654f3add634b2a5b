"""Unpacking an uploaded video archive (zip or tar) safely into one flat folder.

An archive comes from a browser, so nothing in it is trusted: a member whose path is absolute or
climbs out (`../`), a symbolic or hard link, a device or FIFO refuses the whole archive, and so do
more entries, more unpacked bytes or more seconds than the settings allow. Every entry counts
(folders, skipped hidden files and the entries refused anyway), so a tar of a million empty
folders stops at the entry limit; the byte limit is counted on what decompression actually
produces, never on the sizes the archive declares, so a zip bomb stops at the limit. Memory stays
bounded whatever the archive holds: a zip's central directory is sized from its end record before
it is read, a tar is read one header at a time (headers are not kept) and no single read of its
stream, a long-name or pax header included, may exceed `MAX_READ_BYTES`. Members land flat in the
destination under their base name (the video pipeline matches files by name), so two members with
one base name are refused too. A refusal is an `ImportRejected` naming the archive and, as the
field, the member, and its message names the setting that was reached.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import shutil
import stat
import struct
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from django.conf import settings

from datasets_app.services.imports.base import ImportRejected

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
COPY_CHUNK = 1024 * 1024
# The most one read of a tar stream may ask for: member data is read in COPY_CHUNK pieces, so only
# a header claiming to be huge (a GNU long name, a pax record) would ask for more.
MAX_READ_BYTES = 4 * COPY_CHUNK
# The most central-directory bytes a zip may have per allowed entry (46 bytes of record, the name
# and the extra fields): a bigger directory is refused before zipfile lists it in memory.
ZIP_DIRECTORY_BYTES_PER_ENTRY = 1024


@dataclass(frozen=True)
class ArchiveLimits:
    members: int  # every entry: files, folders, skipped hidden files, anything
    unpacked_bytes: int
    seconds: float

    @classmethod
    def from_settings(cls) -> ArchiveLimits:
        return cls(
            members=settings.LEPUS_ARCHIVE_MAX_MEMBERS,
            unpacked_bytes=settings.LEPUS_ARCHIVE_MAX_UNPACKED_BYTES,
            seconds=settings.LEPUS_ARCHIVE_MAX_SECONDS,
        )


@dataclass(frozen=True)
class UnpackedArchive:
    files: list[Path]
    bytes: int
    skipped: list[str]  # hidden files and folders' own entries (e.g. __MACOSX/, .DS_Store)


def archive_unpack(
    *,
    path: Path,
    destination: Path,
    name: str | None = None,
    limits: ArchiveLimits | None = None,
) -> UnpackedArchive:
    """Unpack the zip or tar at `path` into the (empty) folder `destination`; `name` is how errors
    call the archive (the uploaded file's name). Raises `ImportRejected` on anything unsafe, after
    removing whatever it had unpacked."""
    label = name or path.name
    limits = limits or ArchiveLimits.from_settings()
    unpacker = _Unpacker(label=label, destination=destination, limits=limits)
    try:
        if zipfile.is_zipfile(path):
            unpacker.unpack_zip(path)
        else:
            # Not tarfile.is_tarfile: it would read the first header unbounded.
            unpacker.unpack_tar(path)
    except ImportRejected:
        shutil.rmtree(destination, ignore_errors=True)
        destination.mkdir(parents=True, exist_ok=True)
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as error:
        shutil.rmtree(destination, ignore_errors=True)
        destination.mkdir(parents=True, exist_ok=True)
        raise ImportRejected(file=label, message=f"the archive is damaged: {error}") from error
    return UnpackedArchive(files=unpacker.files, bytes=unpacker.written, skipped=unpacker.skipped)


class _Unpacker:
    def __init__(self, *, label: str, destination: Path, limits: ArchiveLimits) -> None:
        self.label = label
        self.destination = destination
        self.limits = limits
        self.files: list[Path] = []
        self.skipped: list[str] = []
        self.entries = 0
        self.written = 0
        self.deadline = time.monotonic() + limits.seconds

    def refuse(self, member: str, message: str) -> ImportRejected:
        return ImportRejected(file=self.label, message=message, field=member[:300])

    def check_time(self, member: str) -> None:
        if time.monotonic() > self.deadline:
            raise self.refuse(
                member,
                f"unpacking the archive took more than {self.limits.seconds:g} s "
                "(LEPUS_ARCHIVE_MAX_SECONDS)",
            )

    def count(self, member: str) -> None:
        """Count one entry of any kind against the entry limit (and the clock)."""
        self.entries += 1
        if self.entries > self.limits.members:
            raise self.refuse(
                member,
                f"the archive holds more than {self.limits.members} entries, folders included "
                "(LEPUS_ARCHIVE_MAX_MEMBERS)",
            )
        self.check_time(member)

    def target(self, member: str) -> Path | None:
        """Where a regular member goes, or None for a hidden file that is skipped."""
        if "\x00" in member or "\\" in member:
            raise self.refuse(member, "the member's name holds a NUL byte or a backslash")
        pure = PurePosixPath(member)
        if pure.is_absolute() or (pure.parts and pure.parts[0].endswith(":")):
            raise self.refuse(member, "the member's path is absolute")
        if ".." in pure.parts:
            raise self.refuse(member, "the member's path leaves the archive's folder (..)")
        if not pure.name or any(part.startswith(".") or part == "__MACOSX" for part in pure.parts):
            self.skipped.append(member)
            return None
        target = self.destination / pure.name
        if target.exists():
            raise self.refuse(
                member, f"a second file named {pure.name} (files are matched by name)"
            )
        return target

    def copy(self, member: str, source: IO[bytes], target: Path) -> None:
        with open(target, "xb") as handle:
            while chunk := source.read(COPY_CHUNK):
                self.check_time(member)
                self.written += len(chunk)
                if self.written > self.limits.unpacked_bytes:
                    raise self.refuse(
                        member,
                        f"the archive unpacks to more than {self.limits.unpacked_bytes} bytes "
                        "(LEPUS_ARCHIVE_MAX_UNPACKED_BYTES)",
                    )
                handle.write(chunk)
        self.files.append(target)

    def unpack_zip(self, path: Path) -> None:
        entries, directory_bytes = _zip_directory_size(path)
        if entries > self.limits.members:
            raise self.refuse(
                f"{entries} entries",
                f"the archive holds more than {self.limits.members} entries, folders included "
                "(LEPUS_ARCHIVE_MAX_MEMBERS)",
            )
        if directory_bytes > self.limits.members * ZIP_DIRECTORY_BYTES_PER_ENTRY:
            raise self.refuse(
                f"{directory_bytes} bytes of central directory",
                f"the archive's list of entries is larger than {ZIP_DIRECTORY_BYTES_PER_ENTRY} "
                f"bytes for each of the {self.limits.members} entries allowed "
                "(LEPUS_ARCHIVE_MAX_MEMBERS)",
            )
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                self.count(info.filename)
                mode = info.external_attr >> 16
                if info.is_dir():
                    continue
                if stat.S_ISLNK(mode):
                    raise self.refuse(info.filename, "the archive holds a symbolic link")
                # Zips written on Windows (or by `writestr`) carry no file type: a plain file.
                if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                    raise self.refuse(info.filename, "the member is not a regular file")
                target = self.target(info.filename)
                if target is None:
                    continue
                with archive.open(info) as source:
                    self.copy(info.filename, source, target)

    def unpack_tar(self, path: Path) -> None:
        with ExitStack() as stack:
            stream = stack.enter_context(_TarStream.open(path, unpacker=self))
            try:
                archive = stack.enter_context(tarfile.open(fileobj=stream, mode="r:"))  # type: ignore[call-overload]
            except tarfile.ReadError as error:
                raise ImportRejected(file=self.label, message="not a zip or tar archive") from error
            self.unpack_tar_members(archive)

    def unpack_tar_members(self, archive: tarfile.TarFile) -> None:
        for info in _tar_members(archive):
            self.count(info.name)
            if info.isdir():
                continue
            if info.issym() or info.islnk():
                raise self.refuse(info.name, "the archive holds a symbolic or hard link")
            if not info.isfile():
                raise self.refuse(info.name, "the member is not a regular file")
            target = self.target(info.name)
            if target is None:
                continue
            source = archive.extractfile(info)
            if source is None:
                raise self.refuse(info.name, "the member cannot be read")
            with source:
                self.copy(info.name, source, target)


def _tar_members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The headers one by one, none kept: TarFile's own iteration appends every header to
    `archive.members`, so a million empty folders would be a million objects in memory."""
    while (info := archive.next()) is not None:
        archive.members.clear()  # type: ignore[attr-defined]  # (not in typeshed's TarFile)
        yield info


# The compressions tarfile's "r:*" would recognise, by their first bytes.
_DECOMPRESSORS: tuple[tuple[bytes, Callable[[IO[bytes]], io.BufferedIOBase]], ...] = (
    (b"\x1f\x8b", lambda handle: gzip.GzipFile(fileobj=handle, mode="rb")),
    (b"BZh", bz2.BZ2File),
    (b"\xfd7zXZ\x00", lzma.LZMAFile),
)


class _TarStream:
    """The (decompressed) byte stream of a tar, for `tarfile.open(mode="r:")`: every read and
    every forward seek goes through here in bounded pieces, checked against the unpacker's clock,
    and no single read may ask for more than MAX_READ_BYTES (tarfile reads a long-name or pax
    header whole, at the size the header claims)."""

    def __init__(
        self, raw: IO[bytes] | io.BufferedIOBase, *, compressed: bool, unpacker: _Unpacker
    ) -> None:
        self.raw = raw
        self.compressed = compressed
        self.unpacker = unpacker

    @classmethod
    @contextmanager
    def open(cls, path: Path, *, unpacker: _Unpacker) -> Iterator[_TarStream]:
        with ExitStack() as stack:
            handle = stack.enter_context(open(path, "rb"))
            magic = handle.read(6)
            handle.seek(0)
            opener = next((o for m, o in _DECOMPRESSORS if magic.startswith(m)), None)
            raw = handle if opener is None else stack.enter_context(opener(handle))
            yield cls(raw, compressed=opener is not None, unpacker=unpacker)

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > MAX_READ_BYTES:
            raise self.unpacker.refuse(
                f"a header of {size} bytes",
                f"the archive asks for a read of more than {MAX_READ_BYTES} bytes at once "
                "(a long-name or pax header)",
            )
        self.unpacker.check_time("the archive's stream")
        return self.raw.read(size)

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        # A compressed stream seeks forward by decompressing: do it in pieces, on the clock.
        position = self.raw.tell()
        if whence != 0 or offset <= position or not self.compressed:
            return self.raw.seek(offset, whence)
        while position < offset:
            piece = self.read(min(COPY_CHUNK, offset - position))
            if not piece:
                break
            position += len(piece)
        return position


def _zip_directory_size(path: Path) -> tuple[int, int]:
    """(entries, bytes) of a zip's central directory as its end record declares them (the zip64
    record where there is one): zipfile reads the whole directory into memory when it opens."""
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        tail_start = max(0, size - (22 + 65535 + 20))
        handle.seek(tail_start)
        tail = handle.read()
        end = tail.rfind(b"PK\x05\x06")
        if end < 0 or len(tail) - end < 22:
            raise zipfile.BadZipFile("no end of central directory record")
        entries, directory_bytes = struct.unpack("<HI", tail[end + 10 : end + 16])
        if entries == 0xFFFF or directory_bytes == 0xFFFFFFFF:
            locator = end - 20
            if locator < 0 or tail[locator : locator + 4] != b"PK\x06\x07":
                raise zipfile.BadZipFile("a zip64 size without its zip64 record")
            (record_at,) = struct.unpack("<Q", tail[locator + 8 : locator + 16])
            handle.seek(record_at)
            record = handle.read(56)
            if len(record) < 56 or record[:4] != b"PK\x06\x06":
                raise zipfile.BadZipFile("the zip64 end record is missing")
            entries, directory_bytes = struct.unpack("<QQ", record[32:48])
    return int(entries), int(directory_bytes)


@contextmanager
def unpacked_archive(*, path: Path, name: str, workdir: Path) -> Iterator[UnpackedArchive]:
    """`archive_unpack` into `workdir/unpacked`, removed afterwards."""
    destination = workdir / "unpacked"
    destination.mkdir(parents=True, exist_ok=False)
    try:
        yield archive_unpack(path=path, destination=destination, name=name)
    finally:
        shutil.rmtree(destination, ignore_errors=True)
