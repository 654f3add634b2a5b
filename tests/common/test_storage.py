from __future__ import annotations

import time
from urllib.parse import parse_qs, urlparse

import pytest
import requests

from common import storage


def test_local_signed_url_serves_the_file_and_refuses_a_forged_signature(client, db):
    storage.put_bytes("clips/a/video.mp4", b"0123456789")
    url = storage.media_url("clips/a/video.mp4", ttl=60)

    response = client.get(url)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"0123456789"

    ranged = client.get(url, HTTP_RANGE="bytes=2-5")
    assert ranged.status_code == 206
    assert ranged.content == b"2345"
    assert ranged["Content-Range"] == "bytes 2-5/10"

    query = parse_qs(urlparse(url).query)
    forged = f"/media/s/clips/a/video.mp4?e={query['e'][0]}&s={'0' * 64}"
    assert client.get(forged).status_code == 403


def test_local_signed_url_expires(client, db, monkeypatch):
    storage.put_bytes("x/y.txt", b"hello")
    url = storage.media_url("x/y.txt", ttl=10)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 11)
    assert client.get(url).status_code == 403


@pytest.mark.parametrize("key", ["../etc/passwd", "a/../../b", "/", ""])
def test_keys_cannot_escape_the_storage_root(key):
    with pytest.raises(ValueError):
        storage.normalise_key(key)


def test_s3_round_trip_and_presigned_url(s3_storage):
    storage.put_bytes("releases/r1/data.jsonl", b'{"a": 1}\n')
    assert storage.exists("releases/r1/data.jsonl")
    assert storage.read_bytes("releases/r1/data.jsonl") == b'{"a": 1}\n'
    assert storage.list_keys("releases/r1") == ["releases/r1/data.jsonl"]
    assert (
        storage.storage_uri("releases/r1/data.jsonl") == f"s3://{s3_storage}/releases/r1/data.jsonl"
    )

    url = storage.media_url("releases/r1/data.jsonl", ttl=60)
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=60" in url
    assert requests.get(url, timeout=10).content == b'{"a": 1}\n'

    with storage.local_copy("releases/r1/data.jsonl") as path:
        assert path.read_bytes() == b'{"a": 1}\n'
    assert storage.delete_prefix("releases/r1") == 1
    assert not storage.exists("releases/r1/data.jsonl")
