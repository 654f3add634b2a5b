"""bench/crowd_scale.py's simulated crowd against a loopback stand-in for Lepus: every worker joins,
loops next -> think -> submit on its own asyncio task, keeps its connection while the server does
(and opens a new one when the server closed it), and what the clients count matches what the
server saw."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import crowd_scale


class FakeLepus:
    """Answers join, next (a clip of 3 candidates, a fresh clip each time) and submit (201), and
    closes every other connection after its answer, as a server whose keep-alive ran out would."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.joined: list[str] = []
        self.submitted: dict[int, dict] = {}
        self.next_served = 0
        self.answers = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def answer(self, status: int, body: object | None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                with fake.lock:
                    fake.answers += 1
                    close = fake.answers % 2 == 0
                self.send_response(status)
                if status != 204:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                if close:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/join"):
                    with fake.lock:
                        fake.joined.append(body["external_id"])
                    self.answer(201, {"worker_token": body["external_id"]})
                elif self.path.endswith("/next"):
                    assert self.headers["Authorization"].startswith("Worker ")
                    with fake.lock:
                        fake.next_served += 1
                        number = fake.next_served
                    self.answer(
                        200,
                        {
                            "assignment_id": number,
                            "clip": {"id": number},
                            "candidates": [{"id": number * 10 + k} for k in range(3)],
                            "questions": [{"key": key} for key in crowd_scale.QUESTION_KEYS],
                        },
                    )
                else:
                    assignment = int(self.path.rstrip("/").split("/")[-2])
                    with fake.lock:
                        fake.submitted[assignment] = body
                    self.answer(201, {"assignment_id": assignment})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeLepus:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeLepus]:
    with FakeLepus() as server:
        yield server


def test_crowd_loops_join_next_think_submit_and_counts_what_the_server_stored(
    fake: FakeLepus,
) -> None:
    crowd = crowd_scale.Crowd(
        host="127.0.0.1",
        port=fake.port,
        slug="fake",
        prefix="t",
        workers=8,
        duration=2.0,
        join_over=0.3,
        think=(0.1, 0.2),
        fast_think=(0.05, 0.06),
        fast_share=0.25,
        rating_noise=0.6,
        keep_alive=True,
        timeout=5,
        seed=3,
    )
    asyncio.run(crowd_scale.drive(crowd))

    assert sorted(fake.joined) == [f"t-{index:05d}" for index in range(8)]
    assert crowd.joined == 8
    assert crowd.errors == {}
    # Every acknowledged submit is one the server stored, and nothing else was stored.
    acknowledged = {ack.submit_id for ack in crowd.acknowledged}
    assert acknowledged == set(fake.submitted)
    assert len(acknowledged) >= 8 * 4  # 2 s of 0.05-0.2 s think times: several clips each
    assert len(crowd.samples["submit"]) == len(acknowledged)
    assert len(crowd.samples["join"]) == 8
    # The server closed every other connection: the clients reconnected instead of failing.
    assert crowd.connections_opened > 8
    for body in fake.submitted.values():
        assert len(body["ratings"]) == 3
        for rating in body["ratings"]:
            assert set(rating) == {"candidate_id", *crowd_scale.QUESTION_KEYS}
            assert all(1 <= rating[key] <= 5 for key in crowd_scale.QUESTION_KEYS)
        assert body["client_timing"]["active_ms"] >= 50


def test_ratings_scatter_around_each_candidates_true_score() -> None:
    import random

    work = {"candidates": [{"id": n} for n in range(200)], "questions": [{"key": "fluency"}]}
    first = crowd_scale.human_ratings(work, random.Random(1), 0.6)
    second = crowd_scale.human_ratings(work, random.Random(2), 0.6)
    truth = [crowd_scale.true_score(n, "fluency") for n in range(200)]
    # Two workers agree with the truth and with each other far beyond chance, but not exactly.
    errors = [abs(rating["fluency"] - score) for rating, score in zip(first, truth, strict=True)]
    assert sum(errors) / len(errors) < 0.8
    same = sum(a["fluency"] == b["fluency"] for a, b in zip(first, second, strict=True))
    assert 60 < same < 200


def test_percentiles_per_minute_and_window() -> None:
    crowd = crowd_scale.Crowd(
        host="127.0.0.1",
        port=1,
        slug="s",
        prefix="p",
        workers=1,
        duration=70,
        join_over=1,
        think=(1, 2),
        fast_think=(1, 2),
        fast_share=0,
        rating_noise=0.6,
        keep_alive=True,
        timeout=1,
        seed=1,
    )
    crowd.samples["next"] = [(float(t), float(t), 200) for t in range(70)]
    crowd.ack_times = [5.0, 65.0, 66.0]
    tables = crowd_scale.latency_tables(crowd)
    assert tables["overall"]["next"]["count"] == 70
    assert tables["per_minute"][0]["next"]["count"] == 60
    assert tables["per_minute"][0]["next"]["p95_ms"] == 56.0
    assert [minute["cycles"] for minute in tables["per_minute"]] == [1, 2]
    assert tables["per_10s"][6]["next"] == [10, 64.0, 69.0, 69.0]
    # join_over 1 s: "after the joins" starts at 11 s.
    assert tables["after_joins"]["next"]["count"] == 59
