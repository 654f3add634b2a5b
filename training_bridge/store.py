"""`common.storage` seen as the `Store` the Rigel code reads and writes (local disk or S3)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from common import storage


class DjangoStore:
    def read_bytes(self, key: str) -> bytes:
        return storage.read_bytes(key)

    def put_bytes(self, key: str, data: bytes) -> str:
        return storage.put_bytes(key, data)

    def put_file(self, key: str, local_path: str | os.PathLike[str]) -> str:
        return storage.put_file(key, local_path)

    def exists(self, key: str) -> bool:
        return storage.exists(key)

    def local_path(self, key: str) -> Path | None:
        """The file itself on local-disk storage (None on S3)."""
        if storage.uses_s3():
            return None
        path = Path(storage.get_storage().path(storage.normalise_key(key)))
        return path if path.is_file() else None

    def list_keys(self, prefix: str) -> list[str]:
        return storage.list_keys(prefix)

    def delete(self, key: str) -> None:
        storage.delete(key)

    @contextmanager
    def local_copy(self, key: str) -> Iterator[Path]:
        with storage.local_copy(key) as path:
            yield path


def store_location() -> tuple[str, dict[str, str]]:
    """Where child processes (torchrun) find the same objects, and the environment they need:
    `s3://bucket/prefix` with the endpoint, or the local media folder."""
    if storage.uses_s3():
        prefix = settings.LEPUS_S3_PREFIX.strip("/")
        location = (
            f"s3://{settings.LEPUS_S3_BUCKET}/{prefix}"
            if prefix
            else f"s3://{settings.LEPUS_S3_BUCKET}"
        )
        env = {
            "LEPUS_S3_ENDPOINT_URL": settings.LEPUS_S3_ENDPOINT_URL or "",
            "LEPUS_S3_REGION": settings.LEPUS_S3_REGION,
        }
        return location, env
    return str(settings.MEDIA_ROOT), {}
