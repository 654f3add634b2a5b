"""The crowd-integrity findings of issue 18, replayed against a real server: gunicorn (gthread, two
processes of four threads) with the production settings module (`config.settings`, DEBUG off,
the platform id check on), the test database on PostgreSQL and a private Redis as its cache, all
on loopback. Each finding is a test that failed before the fix:

- four spellings of one id joined as four workers; now they are one worker with one token;
- after an exclusion, a re-join under another spelling got a new token whose `next` served the
  clip the person still held; now every re-join is refused and the old token reaches nothing;
- a submit 0.05 s after `next`, with `min_seconds_on_clip` 120 and a client claiming 1000 s,
  was stored; now it is refused (409) and nothing is stored;
- 300 concurrent joins from one address got 129 answers against a limit of 60/min, and
  concurrent `next` calls on one token all passed; now exactly the limit passes;
- a 100,000-level nested JSON body to join or submit was a 500 (RecursionError); now a 400;
- 40 wrong curator passwords in a row were all tried; now the login locks after 3.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group, User

from annotation.models import Assignment, AssignmentStatus, Judgment, Participation, Worker
from common.permissions import CURATOR_GROUP
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign
from tests.support.processes import REPO_ROOT, free_port, process_environment, wait_until
from tests.support.services import PrivateRedis

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NEXT = "/api/v1/worker/assignments/next"
ME = "/api/v1/worker/me"
JOIN_LIMIT = 60
NEXT_LIMIT = 60
LOGIN_LIMIT = 3
CURATOR_PASSWORD = "integrity-curator-password-1"
PROLIFIC_ID = "5f1e2d3c4b5a697887766554"
FULL_WIDTH_DIGITS = {ord(char): ord(char) + 0xFEE0 for char in "0123456789"}
# The spellings of one Prolific id: as given, upper case, a zero-width space, full-width digits.
SPELLINGS = [
    PROLIFIC_ID,
    PROLIFIC_ID.upper(),
    PROLIFIC_ID + "\u200b",
    PROLIFIC_ID.translate(FULL_WIDTH_DIGITS),
]


class Server:
    def __init__(self, port: int, log_path: Path, redis: PrivateRedis) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.redis = redis

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def join(self, slug: str, **body: Any) -> requests.Response:
        return requests.post(f"{self.url}/api/v1/campaigns/{slug}/join", json=body, timeout=60)

    def worker(self, token: str) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Worker {token}"
        return session

    def submit_url(self, assignment_id: int) -> str:
        return f"{self.url}/api/v1/worker/assignments/{assignment_id}/submit"

    def curator_session(self, username: str, password: str) -> tuple[requests.Session, int]:
        """A browser-like login through the form: (session, status of the POST)."""
        session = requests.Session()
        session.get(f"{self.url}/accounts/login/", timeout=60).raise_for_status()
        response = session.post(
            f"{self.url}/accounts/login/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": session.cookies["csrftoken"],
            },
            allow_redirects=False,
            timeout=60,
        )
        return session, response.status_code


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Server]:  # type: ignore[no-untyped-def]
    redis = PrivateRedis().start()
    port = free_port()
    log_path = tmp_path_factory.mktemp("integrity") / "gunicorn.log"
    with django_db_blocker.unblock():
        env = process_environment(
            {
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "DJANGO_DEBUG": "false",
                "REDIS_URL": redis.url,
                "LEPUS_CHECK_WORKER_IDS": "true",
                "LEPUS_THROTTLE_JOIN": f"{JOIN_LIMIT}/min",
                "LEPUS_THROTTLE_NEXT": f"{NEXT_LIMIT}/min",
                "LEPUS_LOGIN_MAX_FAILURES": str(LOGIN_LIMIT),
                "LEPUS_LOG_LEVEL": "WARNING",
            }
        )
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--worker-class",
            "gthread",
            "--threads",
            "4",
            "--timeout",
            "120",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    running = Server(port, log_path, redis)

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{running.log()}")
        try:
            return requests.get(f"{running.url}{ME}", timeout=20).status_code == 401
        except requests.RequestException:  # not listening yet, or still importing
            return False

    try:
        wait_until(answers, timeout=90, message="gunicorn to answer")
        yield running
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        log.close()
        redis.stop()


@pytest.fixture
def live(server: Server) -> Server:
    """The server with fresh throttle and lockout counters for each test."""
    import redis as redis_client

    redis_client.Redis.from_url(server.redis.url).flushall()
    return server


def _assert_no_server_error(server: Server) -> None:
    log = server.log()
    assert "Traceback" not in log, log[-3000:]
    assert "RecursionError" not in log


# --- one person, one worker ---------------------------------------------------------------------


def test_the_spellings_of_one_id_join_as_one_worker_and_made_up_ids_are_refused(live):
    campaign = crowd_campaign(slug="spellings", clips=2, candidates_per_clip=2)

    answers = [live.join(campaign.slug, platform="prolific", external_id=s) for s in SPELLINGS]
    probe = live.join(campaign.slug, platform="prolific", external_id="WORKER_A_0001")

    assert [answer.status_code for answer in answers] == [200, 200, 200, 200]
    assert len({answer.json()["worker_token"] for answer in answers}) == 1
    assert list(Worker.objects.values_list("external_id", flat=True)) == [PROLIFIC_ID]
    assert Participation.objects.count() == 1
    assert probe.status_code == 400
    assert probe.json() == {
        "external_id": ["Not a Prolific participant id (24 hexadecimal characters)."]
    }


def test_after_exclusion_a_rejoin_is_refused_and_no_clip_is_seen_twice(live):
    campaign = crowd_campaign(slug="excluded", clips=3, candidates_per_clip=2)
    user = User.objects.create_user("integrity-curator")
    user.password = PBKDF2PasswordHasher().encode(CURATOR_PASSWORD, "integritysalt0001")
    user.save(update_fields=["password"])
    user.groups.add(Group.objects.get_or_create(name=CURATOR_GROUP)[0])

    token = live.join(campaign.slug, platform="prolific", external_id=SPELLINGS[0]).json()[
        "worker_token"
    ]
    worker = live.worker(token)
    held = worker.post(f"{live.url}{NEXT}", timeout=60).json()
    participation = Participation.objects.get()

    curator, status = live.curator_session("integrity-curator", CURATOR_PASSWORD)
    assert status == 302
    excluded = curator.post(
        f"{live.url}/api/v1/campaigns/{campaign.slug}/quality/workers/{participation.pk}/exclude",
        json={"note": "one person, many identities"},
        headers={"X-CSRFToken": curator.cookies["csrftoken"], "Referer": live.url},
        timeout=60,
    )
    assert excluded.status_code == 200, excluded.text

    rejoins = [live.join(campaign.slug, platform="prolific", external_id=s) for s in SPELLINGS]
    assert {answer.status_code for answer in rejoins} == {403}
    assert rejoins[1].json()["state"] == "screened_out"
    answers = [
        worker.post(f"{live.url}{NEXT}", timeout=60),
        worker.get(f"{live.url}{ME}", timeout=60),
        worker.post(
            live.submit_url(held["assignment_id"]),
            json={"ratings": all_candidate_ratings(held)},
            timeout=60,
        ),
    ]
    # Every route answers the screen-out (403), and the lease the person held was ended at once.
    assert [answer.status_code for answer in answers] == [403, 403, 403]
    assert {answer.json()["state"] for answer in answers} == {"screened_out"}
    # The person held one clip, was served nothing else and stored nothing.
    assert list(Assignment.objects.values_list("clip_id", flat=True)) == [held["clip"]["id"]]
    assert Assignment.objects.get().status == AssignmentStatus.EXPIRED
    assert Judgment.objects.count() == 0
    assert Worker.objects.count() == 1
    _assert_no_server_error(live)


def test_a_person_is_never_served_a_clip_twice_whichever_spelling_they_use(live):
    campaign = crowd_campaign(slug="twice", clips=3, candidates_per_clip=2)
    served: list[int] = []
    for spelling in SPELLINGS * 2:
        token = live.join(campaign.slug, platform="prolific", external_id=spelling).json()[
            "worker_token"
        ]
        offered = live.worker(token).post(f"{live.url}{NEXT}", timeout=60)
        if offered.status_code == 204:
            break
        payload = offered.json()
        served.append(payload["clip"]["id"])
        stored = live.worker(token).post(
            live.submit_url(payload["assignment_id"]),
            json={"ratings": all_candidate_ratings(payload)},
            timeout=60,
        )
        assert stored.status_code == 201, stored.text

    assert len(served) == 3
    assert len(set(served)) == 3


# --- timing on the server -----------------------------------------------------------------------


def test_a_fast_submit_is_refused_and_stores_nothing(live):
    campaign = crowd_campaign(slug="fast", clips=1, candidates_per_clip=3, min_seconds_on_clip=120)
    token = live.join(campaign.slug, platform="prolific", external_id=PROLIFIC_ID).json()[
        "worker_token"
    ]
    worker = live.worker(token)
    offered = worker.post(f"{live.url}{NEXT}", timeout=60).json()
    time.sleep(0.05)

    response = worker.post(
        live.submit_url(offered["assignment_id"]),
        json={
            "ratings": all_candidate_ratings(offered),
            "client_timing": {"active_ms": 999_999, "video_played_ms": 999_999},
        },
        timeout=60,
    )

    assert response.status_code == 409
    assert 118 <= response.json()["retry_after"] <= 120
    assert response.headers["Retry-After"] == str(response.json()["retry_after"])
    assert Judgment.objects.count() == 0
    assert Assignment.objects.get().status == AssignmentStatus.LIVE
    assert Participation.objects.get().assignments_submitted == 0


# --- throttles that hold under concurrency ------------------------------------------------------


def test_300_concurrent_joins_from_one_address_yield_the_limit(live):
    campaign = crowd_campaign(slug="crowded", clips=1, candidates_per_clip=1)

    def one(index: int) -> int:
        return live.join(
            campaign.slug, platform="prolific", external_id=f"{index:024x}"
        ).status_code

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=48) as pool:
        statuses = Counter(pool.map(one, range(300)))
    elapsed = time.monotonic() - started

    assert elapsed < 60, "the burst must fit in one throttle window for the count to be exact"
    assert statuses == {200: JOIN_LIMIT, 429: 300 - JOIN_LIMIT}
    assert Worker.objects.count() == JOIN_LIMIT
    _assert_no_server_error(live)


def test_concurrent_next_calls_on_one_token_yield_the_limit(live):
    campaign = crowd_campaign(slug="hammered", clips=2, candidates_per_clip=1)
    token = live.join(campaign.slug, platform="prolific", external_id=PROLIFIC_ID).json()[
        "worker_token"
    ]

    def one(_index: int) -> int:
        return requests.post(
            f"{live.url}{NEXT}", headers={"Authorization": f"Worker {token}"}, timeout=60
        ).status_code

    with ThreadPoolExecutor(max_workers=48) as pool:
        statuses = Counter(pool.map(one, range(160)))

    assert statuses == {200: NEXT_LIMIT, 429: 160 - NEXT_LIMIT}
    assert Assignment.objects.count() == 1  # the same live lease every time


# --- hostile bodies -----------------------------------------------------------------------------


def test_a_deeply_nested_body_is_400_on_join_and_submit(live):
    campaign = crowd_campaign(slug="nested", clips=1, candidates_per_clip=1)
    token = live.join(campaign.slug, platform="prolific", external_id=PROLIFIC_ID).json()[
        "worker_token"
    ]
    offered = live.worker(token).post(f"{live.url}{NEXT}", timeout=60).json()
    nested = "[" * 100_000 + "]" * 100_000
    headers = {"Content-Type": "application/json"}

    joined = requests.post(
        f"{live.url}/api/v1/campaigns/{campaign.slug}/join",
        data=nested,
        headers=headers,
        timeout=60,
    )
    submitted = live.worker(token).post(
        live.submit_url(offered["assignment_id"]), data=nested, headers=headers, timeout=60
    )

    assert (joined.status_code, submitted.status_code) == (400, 400)
    assert joined.json() == {"detail": "JSON parse error - nested deeper than 32 levels."}
    assert Judgment.objects.count() == 0
    assert Worker.objects.count() == 1
    _assert_no_server_error(live)


# --- the curator login --------------------------------------------------------------------------


def test_the_curator_login_locks_after_the_configured_failures(live):
    user = User.objects.create_user("locked-curator")
    user.password = PBKDF2PasswordHasher().encode(CURATOR_PASSWORD, "integritysalt0002")
    user.save(update_fields=["password"])

    wrong = [live.curator_session("locked-curator", f"guess-{n}")[1] for n in range(LOGIN_LIMIT)]
    session, locked = live.curator_session("locked-curator", CURATOR_PASSWORD)
    page = session.get(f"{live.url}/accounts/login/", timeout=60)

    assert wrong == [200] * LOGIN_LIMIT
    assert locked == 429
    assert "sessionid" not in session.cookies
    assert re.search(r"script-src 'self'", page.headers["Content-Security-Policy"])
    worker_page = requests.get(f"{live.url}/w/nested-none/", timeout=60)
    assert worker_page.status_code == 404
    assert "Content-Security-Policy" in worker_page.headers
