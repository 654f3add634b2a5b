"""A thin typed wrapper around Django storage: local disk by default, S3 when a bucket is set.

Browsers only ever get short-lived URLs: a presigned S3 URL, or for local disk a URL signed with
HMAC (`/media/s/<key>?e=<expiry>&s=<signature>`) that `common.views.signed_media` checks.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages


class StorageUnavailable(RuntimeError):
    """The storage backend (S3) could not be reached."""


def is_unavailable(error: BaseException) -> bool:
    """Whether `error` (or what caused it) means the storage could not be reached: a connection
    refused, reset or timed out, or a 5xx from S3. Such failures are worth retrying later."""
    from botocore.exceptions import ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (StorageUnavailable, BotoConnectionError, HTTPClientError)):
            return True
        if isinstance(current, ClientError):
            status = current.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if int(status or 0) >= 500:
                return True
        current = current.__cause__ or current.__context__
    return False


def get_storage() -> Storage:
    return storages["default"]


def uses_s3() -> bool:
    return bool(settings.LEPUS_S3_BUCKET)


def normalise_key(key: str) -> str:
    """Reject keys that could escape the storage root; return the clean relative key."""
    clean = key.replace("\\", "/").lstrip("/")
    parts = [part for part in clean.split("/") if part not in ("", ".")]
    if not parts or any(part == ".." for part in parts):
        raise ValueError(f"invalid storage key: {key!r}")
    return "/".join(parts)


def put_file(key: str, local_path: str | os.PathLike[str]) -> str:
    """Upload a local file under `key` (overwriting); returns the key."""
    with open(local_path, "rb") as handle:
        return put_stream(key, handle)


def put_stream(key: str, handle: IO[bytes]) -> str:
    """Upload what `handle` reads (in chunks, never whole in memory) under `key`; returns the key."""
    key = normalise_key(key)
    storage = get_storage()
    if not uses_s3() and storage.exists(key):
        storage.delete(key)
    saved = storage.save(key, File(handle, name=os.path.basename(key)))
    if saved != key:  # FileSystemStorage renames on collision; we deleted first, so this is a race
        raise RuntimeError(f"storage saved {key!r} as {saved!r}")
    return key


def put_bytes(key: str, data: bytes) -> str:
    key = normalise_key(key)
    storage = get_storage()
    if not uses_s3() and storage.exists(key):
        storage.delete(key)
    saved = storage.save(key, ContentFile(data, name=os.path.basename(key)))
    if saved != key:
        raise RuntimeError(f"storage saved {key!r} as {saved!r}")
    return key


def read_bytes(key: str) -> bytes:
    with get_storage().open(normalise_key(key), "rb") as handle:
        data: bytes = handle.read()
    return data


def open_file(key: str) -> IO[bytes]:
    return get_storage().open(normalise_key(key), "rb")  # type: ignore[no-any-return]


def exists(key: str) -> bool:
    return bool(get_storage().exists(normalise_key(key)))


def delete(key: str) -> None:
    storage = get_storage()
    key = normalise_key(key)
    if storage.exists(key):
        storage.delete(key)


def list_keys(prefix: str) -> list[str]:
    """Every key below `prefix` (recursively), sorted."""
    storage = get_storage()
    prefix = normalise_key(prefix)
    found: list[str] = []

    def walk(folder: str) -> None:
        try:
            directories, files = storage.listdir(folder)
        except FileNotFoundError:
            return
        found.extend(f"{folder}/{name}" for name in files)
        for directory in directories:
            walk(f"{folder}/{directory}")

    walk(prefix)
    return sorted(found)


def every_key() -> Iterator[str]:
    """Every object in the storage (below `LEPUS_S3_PREFIX` on S3), as keys relative to its root.

    S3 is listed flat, a thousand keys a request (walking "directories" would cost a request per
    folder); the local disk is walked in sorted order."""
    storage = get_storage()
    if uses_s3():
        location = str(getattr(storage, "location", "") or "").strip("/")
        prefix = f"{location}/" if location else ""
        for summary in storage.bucket.objects.filter(Prefix=prefix):  # type: ignore[attr-defined]
            key = summary.key[len(prefix) :]
            if key and not key.endswith("/"):
                yield key
        return
    root = Path(storage.path(""))
    if not root.is_dir():
        return
    for folder, directories, files in os.walk(root):
        directories.sort()
        relative = Path(folder).relative_to(root).as_posix()
        for name in sorted(files):
            yield name if relative == "." else f"{relative}/{name}"


def storage_root() -> str:
    """Where the storage keeps its objects, for humans: s3://bucket/prefix or a local folder."""
    if uses_s3():
        location = str(getattr(get_storage(), "location", "") or "").strip("/")
        return f"s3://{settings.LEPUS_S3_BUCKET}/{location}".rstrip("/")
    return str(Path(get_storage().path("")))


def delete_prefix(prefix: str) -> int:
    keys = list_keys(prefix)
    storage = get_storage()
    for key in keys:
        storage.delete(key)
    return len(keys)


@contextmanager
def local_copy(key: str, *, suffix: str = "") -> Iterator[Path]:
    """A local path holding the object's bytes (the file itself on local disk, a temp copy on S3)."""
    key = normalise_key(key)
    storage = get_storage()
    if not uses_s3():
        yield Path(storage.path(key))
        return
    handle, temp_name = tempfile.mkstemp(suffix=suffix or Path(key).suffix)
    try:
        with os.fdopen(handle, "wb") as target, storage.open(key, "rb") as source:
            shutil.copyfileobj(source, target, length=1024 * 1024)
        yield Path(temp_name)
    finally:
        os.unlink(temp_name)


def storage_uri(key: str) -> str:
    """Where an object lives, for humans and manifests: s3://bucket/prefix/key or a local path."""
    key = normalise_key(key)
    if uses_s3():
        prefix = settings.LEPUS_S3_PREFIX.strip("/")
        full = f"{prefix}/{key}" if prefix else key
        return f"s3://{settings.LEPUS_S3_BUCKET}/{full}"
    return str(Path(get_storage().path(key)))


def _local_signature(key: str, expires: int) -> str:
    message = f"{key}\n{expires}".encode()
    secret = f"lepus-media:{settings.SECRET_KEY}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def verify_local_signature(key: str, expires: str, signature: str) -> bool:
    try:
        expires_at = int(expires)
    except (TypeError, ValueError):
        return False
    if expires_at < int(time.time()):
        return False
    expected = _local_signature(key, expires_at)
    return hmac.compare_digest(expected, signature or "")


def media_url(key: str, *, ttl: int | None = None, download_name: str | None = None) -> str:
    """A short-lived URL a browser may fetch the object from."""
    key = normalise_key(key)
    ttl = ttl or settings.LEPUS_MEDIA_URL_TTL
    if uses_s3():
        storage = get_storage()
        parameters = {}
        if download_name:
            parameters["ResponseContentDisposition"] = f'attachment; filename="{download_name}"'
        try:
            return str(storage.url(key, parameters=parameters or None, expire=ttl))  # type: ignore[call-arg]
        except Exception as error:  # botocore raises many kinds; all mean "no URL now"
            raise StorageUnavailable(str(error)) from error
    expires = int(time.time()) + ttl
    query = {"e": str(expires), "s": _local_signature(key, expires)}
    if download_name:
        query["download"] = download_name
    return f"/media/s/{quote(key)}?{urlencode(query)}"
