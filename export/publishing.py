"""Staging and atomic publication of release files, on local disk or S3 (through common.storage).

A build writes into `releases/_staging/<id>-<attempt>/` (on S3: a local temporary folder uploaded
to that prefix). Publication first verifies every file's sha256 where it lies, then moves it to
`releases/<id>/`: one `os.rename` of the folder on local disk; on S3 a server-side copy of each
object, after which the staging objects are deleted. The release row is marked succeeded only
after that, and only succeeded releases are listed, so a killed build never shows partial files.
A re-run first clears the stale staging folders of earlier attempts and any half-copied
`releases/<id>/`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.conf import settings

from common import storage
from export.records import sha256_file

logger = logging.getLogger(__name__)

RELEASES_PREFIX = "releases"
STAGING_PREFIX = f"{RELEASES_PREFIX}/_staging"


class PublicationError(RuntimeError):
    """A staged file does not match the hash computed while it was written."""


def release_prefix(release_id: int) -> str:
    return f"{RELEASES_PREFIX}/{release_id}"


def staging_prefix(release_id: int, attempt: int) -> str:
    return f"{STAGING_PREFIX}/{release_id}-{attempt}"


# --- S3 helpers (the bucket of django-storages' S3Storage) -----------------------------------
def _s3_full_key(key: str) -> str:
    location = str(getattr(storage.get_storage(), "location", "") or "").strip("/")
    key = storage.normalise_key(key)
    return f"{location}/{key}" if location else key


def _s3_relative(full_key: str) -> str:
    location = str(getattr(storage.get_storage(), "location", "") or "").strip("/")
    return full_key[len(location) + 1 :] if location else full_key


def _s3_keys(prefix: str) -> list[str]:
    bucket = storage.get_storage().bucket  # type: ignore[attr-defined]
    full = _s3_full_key(prefix).rstrip("/") + "/"
    return sorted(_s3_relative(item.key) for item in bucket.objects.filter(Prefix=full))


def _s3_delete(keys: list[str]) -> None:
    bucket = storage.get_storage().bucket  # type: ignore[attr-defined]
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        bucket.delete_objects(
            Delete={"Objects": [{"Key": _s3_full_key(key)} for key in chunk], "Quiet": True}
        )


def _s3_copy(source: str, target: str) -> None:
    backend = storage.get_storage()
    bucket = backend.bucket  # type: ignore[attr-defined]
    bucket.copy({"Bucket": bucket.name, "Key": _s3_full_key(source)}, _s3_full_key(target))


def _s3_sha256(key: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with storage.open_file(key) as handle:
            while chunk := handle.read(4 * 1024 * 1024):
                digest.update(chunk)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


# --- Either backend ---------------------------------------------------------------------------
def keys_under(prefix: str) -> list[str]:
    """Every stored key below `prefix`, relative to the storage root, sorted."""
    if storage.uses_s3():
        return _s3_keys(prefix)
    root = Path(storage.get_storage().path(storage.normalise_key(prefix)))
    if not root.is_dir():
        return []
    base = Path(storage.get_storage().path(""))
    return sorted(
        str(path.relative_to(base)).replace(os.sep, "/")
        for path in root.rglob("*")
        if path.is_file()
    )


def delete_tree(prefix: str) -> None:
    if storage.uses_s3():
        _s3_delete(_s3_keys(prefix))
        return
    root = Path(storage.get_storage().path(storage.normalise_key(prefix)))
    if root.exists():
        shutil.rmtree(root)


def stored_sha256(key: str) -> str | None:
    """sha256 of a stored object, or None if it does not exist."""
    if storage.uses_s3():
        return _s3_sha256(key)
    path = Path(storage.get_storage().path(storage.normalise_key(key)))
    return sha256_file(path) if path.is_file() else None


class Staging:
    """Where one build attempt writes its files, and how they are published."""

    def __init__(self, *, release_id: int, attempt: int) -> None:
        self.release_id = release_id
        self.attempt = attempt
        self.prefix = staging_prefix(release_id, attempt)
        self.final_prefix = release_prefix(release_id)
        self._temporary: Path | None = None
        if storage.uses_s3():
            base = Path(settings.VAR_DIR) / "tmp"
            base.mkdir(parents=True, exist_ok=True)
            self._temporary = Path(tempfile.mkdtemp(prefix=f"release-{release_id}-", dir=base))
            self.root = self._temporary
        else:
            self.root = Path(storage.get_storage().path(self.prefix))
            if self.root.exists():
                shutil.rmtree(self.root)
            self.root.mkdir(parents=True)

    def clear_stale(self) -> None:
        """Remove what earlier, killed attempts of this release left behind."""
        for attempt_prefix in self._stale_staging_prefixes():
            logger.info("removing stale staging %s", attempt_prefix)
            delete_tree(attempt_prefix)
        delete_tree(self.final_prefix)

    def _stale_staging_prefixes(self) -> list[str]:
        mine = f"{self.release_id}-"
        if storage.uses_s3():
            folders = {
                key[len(STAGING_PREFIX) + 1 :].split("/", 1)[0] for key in _s3_keys(STAGING_PREFIX)
            }
        else:
            base = Path(storage.get_storage().path(STAGING_PREFIX))
            folders = {path.name for path in base.iterdir()} if base.is_dir() else set()
        return [
            f"{STAGING_PREFIX}/{folder}"
            for folder in sorted(folders)
            if folder.startswith(mine) and folder != f"{self.release_id}-{self.attempt}"
        ]

    def publish(self, files: dict[str, str]) -> None:
        """Verify every file against `files` ({relative path: sha256}) and move them to
        `releases/<id>/`. Raises PublicationError on a mismatch (nothing is published then)."""
        if storage.uses_s3():
            self._publish_s3(files)
        else:
            self._publish_local(files)

    def _check_complete(self, present: set[str], files: dict[str, str]) -> None:
        if present != set(files):
            raise PublicationError(
                f"staged files differ from the build's list: missing {sorted(set(files) - present)}, "
                f"unexpected {sorted(present - set(files))}"
            )

    def _publish_local(self, files: dict[str, str]) -> None:
        present = {
            str(path.relative_to(self.root)).replace(os.sep, "/")
            for path in self.root.rglob("*")
            if path.is_file()
        }
        self._check_complete(present, files)
        # hashlib releases the GIL on large buffers: two files are hashed at once.
        with ThreadPoolExecutor(max_workers=2) as pool:
            hashes = dict(
                zip(
                    sorted(files),
                    pool.map(lambda relative: sha256_file(self.root / relative), sorted(files)),
                    strict=True,
                )
            )
        for relative, expected in sorted(files.items()):
            if hashes[relative] != expected:
                raise PublicationError(
                    f"{relative}: staged sha256 {hashes[relative]} != {expected}"
                )
        final = Path(storage.get_storage().path(self.final_prefix))
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            shutil.rmtree(final)
        os.rename(self.root, final)  # atomic on one filesystem: all files appear at once
        with contextlib.suppress(OSError):  # other builds may be staging: only if empty
            self.root.parent.rmdir()

    def _publish_s3(self, files: dict[str, str]) -> None:
        assert self._temporary is not None
        for relative in sorted(files):
            storage.put_file(f"{self.prefix}/{relative}", self._temporary / relative)
        present = {key[len(self.prefix) + 1 :] for key in _s3_keys(self.prefix)}
        self._check_complete(present, files)
        for relative, expected in sorted(files.items()):
            actual = _s3_sha256(f"{self.prefix}/{relative}")
            if actual != expected:
                raise PublicationError(f"{relative}: uploaded sha256 {actual} != {expected}")
        for relative in sorted(files):
            _s3_copy(f"{self.prefix}/{relative}", f"{self.final_prefix}/{relative}")
        _s3_delete([f"{self.prefix}/{relative}" for relative in sorted(files)])
        shutil.rmtree(self._temporary, ignore_errors=True)

    def discard(self) -> None:
        """Remove this attempt's staging (after a failure or a cancellation)."""
        try:
            delete_tree(self.prefix)
        except Exception:  # storage down: the next attempt's clear_stale retries
            logger.exception("could not remove staging %s", self.prefix)
        if not storage.uses_s3():
            with contextlib.suppress(OSError):
                self.root.parent.rmdir()
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
