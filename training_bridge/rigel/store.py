"""Where the method reads releases and writes caches, checkpoints and artifacts.

The pure-ML code never imports Django: it talks to a `Store` (keys like `training/cache/...`). The
Django side passes an adapter over `common.storage` (local disk or S3); the command line and the
tests use `LocalStore`, a folder on disk with the same key layout.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class Store(Protocol):
    def read_bytes(self, key: str) -> bytes: ...

    def put_bytes(self, key: str, data: bytes) -> str: ...

    def put_file(self, key: str, local_path: str | os.PathLike[str]) -> str: ...

    def exists(self, key: str) -> bool: ...

    def list_keys(self, prefix: str) -> list[str]: ...

    def delete(self, key: str) -> None: ...

    def local_copy(self, key: str) -> AbstractContextManager[Path]: ...


def clean_key(key: str) -> str:
    """The same rule as `common.storage.normalise_key`: relative, no `..`."""
    clean = key.replace("\\", "/").lstrip("/")
    parts = [part for part in clean.split("/") if part not in ("", ".")]
    if not parts or any(part == ".." for part in parts):
        raise ValueError(f"invalid storage key: {key!r}")
    return "/".join(parts)


class LocalStore:
    """A folder on disk addressed by storage keys; writes are atomic (temp file + rename)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / clean_key(key)

    def read_bytes(self, key: str) -> bytes:
        return self.path(key).read_bytes()

    def put_bytes(self, key: str, data: bytes) -> str:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temp_name, target)
        return clean_key(key)

    def put_file(self, key: str, local_path: str | os.PathLike[str]) -> str:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        os.close(handle)
        shutil.copyfile(local_path, temp_name)
        os.replace(temp_name, target)
        return clean_key(key)

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def local_path(self, key: str) -> Path | None:
        path = self.path(key)
        return path if path.is_file() else None

    def list_keys(self, prefix: str) -> list[str]:
        base = self.path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            str(path.relative_to(self.root)).replace(os.sep, "/")
            for path in base.rglob("*")
            if path.is_file() and not path.name.startswith(".tmp-")
        )

    def delete(self, key: str) -> None:
        path = self.path(key)
        if path.is_file():
            path.unlink()

    @contextmanager
    def local_copy(self, key: str) -> Iterator[Path]:
        yield self.path(key)


class S3Store:
    """An S3 bucket (any S3-compatible server) under a key prefix, through boto3.

    Used by the command line when it runs as torchrun children of a Celery task that stores on S3:
    the children reach the same objects as `common.storage` without importing Django.
    """

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
    ) -> None:
        import boto3

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = boto3.client("s3", endpoint_url=endpoint_url or None, region_name=region)

    @classmethod
    def from_uri(
        cls, uri: str, *, endpoint_url: str | None = None, region: str | None = None
    ) -> S3Store:
        if not uri.startswith("s3://"):
            raise ValueError(f"not an s3:// URI: {uri}")
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        return cls(bucket, prefix=prefix, endpoint_url=endpoint_url, region=region)

    def _full(self, key: str) -> str:
        key = clean_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def read_bytes(self, key: str) -> bytes:
        response = self.client.get_object(Bucket=self.bucket, Key=self._full(key))
        return bytes(response["Body"].read())

    def put_bytes(self, key: str, data: bytes) -> str:
        self.client.put_object(Bucket=self.bucket, Key=self._full(key), Body=data)
        return clean_key(key)

    def put_file(self, key: str, local_path: str | os.PathLike[str]) -> str:
        self.client.upload_file(str(local_path), self.bucket, self._full(key))
        return clean_key(key)

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._full(key))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def list_keys(self, prefix: str) -> list[str]:
        full = self._full(prefix).rstrip("/") + "/"
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
            keys.extend(item["Key"][strip:] for item in page.get("Contents", []))
        return sorted(keys)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._full(key))

    @contextmanager
    def local_copy(self, key: str) -> Iterator[Path]:
        handle, temp_name = tempfile.mkstemp(suffix=Path(key).suffix)
        os.close(handle)
        try:
            self.client.download_file(self.bucket, self._full(key), temp_name)
            yield Path(temp_name)
        finally:
            os.unlink(temp_name)


def store_from_location(location: str, **s3_options: str | None) -> LocalStore | S3Store:
    """`s3://bucket/prefix` or a local folder."""
    if location.startswith("s3://"):
        return S3Store.from_uri(location, **s3_options)  # type: ignore[arg-type]
    return LocalStore(location)
