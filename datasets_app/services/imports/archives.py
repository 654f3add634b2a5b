"""Unpacking an uploaded video archive (zip or tar) safely into one flat folder.

An archive comes from a browser, so nothing in it is trusted: a member whose path is absolute or
climbs out (`../`), a symbolic or hard link, a device or FIFO refuses the whole archive, and so do
more members or more unpacked bytes than the settings allow. The byte limit is counted on what
decompression actually produces, never on the sizes the archive declares, so a zip bomb stops at
the limit. Members land flat in the destination under their base name (the video pipeline
matches files by name), so two members with one base name are refused too. A refusal is an
`ImportRejected` naming the archive and, as the field, the member.
"""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from django.conf import settings

from datasets_app.services.imports.base import ImportRejected

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
COPY_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class ArchiveLimits:
    members: int
    unpacked_bytes: int

    @classmethod
    def from_settings(cls) -> ArchiveLimits:
        return cls(
            members=settings.LEPUS_ARCHIVE_MAX_MEMBERS,
            unpacked_bytes=settings.LEPUS_ARCHIVE_MAX_UNPACKED_BYTES,
        )


@dataclass(frozen=True)
class UnpackedArchive:
    files: list[Path]
    bytes: int
    skipped: list[str]  # hidden files and folders' own entries (e.g. __MACOSX/, .DS_Store)


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


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
        elif tarfile.is_tarfile(path):
            unpacker.unpack_tar(path)
        else:
            raise ImportRejected(file=label, message="not a zip or tar archive")
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
        self.members = 0
        self.written = 0

    def refuse(self, member: str, message: str) -> ImportRejected:
        return ImportRejected(file=self.label, message=message, field=member[:300])

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
        self.members += 1
        if self.members > self.limits.members:
            raise self.refuse(
                member,
                f"the archive holds more than {self.limits.members} files "
                "(LEPUS_ARCHIVE_MAX_MEMBERS)",
            )
        target = self.destination / pure.name
        if target.exists():
            raise self.refuse(
                member, f"a second file named {pure.name} (files are matched by name)"
            )
        return target

    def copy(self, member: str, source: IO[bytes], target: Path) -> None:
        with open(target, "xb") as handle:
            while chunk := source.read(COPY_CHUNK):
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
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
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
        with tarfile.open(path, mode="r:*") as archive:
            for info in _tar_members(archive):
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
    # Iterating (not getmembers()) reads the headers one by one: a tar of a million empty members
    # is refused at the member limit instead of being listed in memory first.
    yield from archive


@contextmanager
def unpacked_archive(*, path: Path, name: str, workdir: Path) -> Iterator[UnpackedArchive]:
    """`archive_unpack` into `workdir/unpacked`, removed afterwards."""
    destination = workdir / "unpacked"
    destination.mkdir(parents=True, exist_ok=False)
    try:
        yield archive_unpack(path=path, destination=destination, name=name)
    finally:
        shutil.rmtree(destination, ignore_errors=True)
