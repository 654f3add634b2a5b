"""bench/load_workers.py spreads its simulated workers over several web servers: worker i joins and
works on server i % n (what bench/topology.sh relies on to load both gunicorn servers)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import load_workers


class RecordingServer:
    """A loopback server that answers like Lepus's join and next (nothing left: 204) and records
    who asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.joined: list[str] = []
        self.next_tokens: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/join"):
                    token = f"{server.name}:{body['external_id']}"
                    server.joined.append(body["external_id"])
                    payload = json.dumps({"worker_token": token}).encode()
                    self.send_response(201)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                server.next_tokens.append(self.headers["Authorization"].split(" ", 1)[1])
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> RecordingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def two_servers() -> Iterator[tuple[RecordingServer, RecordingServer]]:
    with RecordingServer("a") as first, RecordingServer("b") as second:
        yield first, second


def test_worker_i_joins_and_works_on_server_i_mod_n(two_servers):
    first, second = two_servers
    target = load_workers.LepusTarget(
        base_url=[first.url, second.url], campaign="spread", db_dsn="unused"
    )
    target.join(5)

    assert first.joined == [
        "loadbench-spread-0000",
        "loadbench-spread-0002",
        "loadbench-spread-0004",
    ]
    assert second.joined == ["loadbench-spread-0001", "loadbench-spread-0003"]

    state = load_workers.RunState(deadline=time.monotonic() + 30, max_cycles=None)
    for worker in range(5):
        load_workers.worker_loop(target, worker, state, timeout=5)

    # Each worker asked once, on its own server, with the token that server gave it.
    assert first.next_tokens == [
        "a:loadbench-spread-0000",
        "a:loadbench-spread-0002",
        "a:loadbench-spread-0004",
    ]
    assert second.next_tokens == ["b:loadbench-spread-0001", "b:loadbench-spread-0003"]
    assert state.workers_exhausted == 5
    assert not state.errors


def test_one_base_url_keeps_every_worker_on_it(two_servers):
    first, second = two_servers
    target = load_workers.LepusTarget(base_url=first.url, campaign="single", db_dsn="unused")
    target.join(3)

    assert target.base_url == first.url
    assert [target.base_url_for(worker) for worker in range(3)] == [first.url] * 3
    assert len(first.joined) == 3
    assert second.joined == []
