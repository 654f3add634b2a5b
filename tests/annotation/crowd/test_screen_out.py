"""A worker screened out by quality control, through the real worker API: no clip and no "nothing
left" once excluded, and a screen-out text that names only what the page shows."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from annotation.crowd.services.screen_out import screen_out_payload
from annotation.models import Assignment, CampaignCandidate, ParticipationStatus
from annotation.quality.exclusions import worker_exclude
from tests.annotation.crowd.test_worker_api import NEXT, worker_client
from tests.annotation.crowd_factories import crowd_campaign, crowd_join

PID = "5f0000000000000000000e01"


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        # Inside a transaction the statistics views keep their first snapshot: drop it.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_a_worker_excluded_while_next_waits_gets_the_screen_out_not_nothing_left():
    """The authentication read the worker as active; quality control excluded them before the
    claim took the participation lock. The claim hands out nothing: the answer is the screen-out,
    not 204 (on which the page ends as if the study were done)."""
    campaign = crowd_campaign(
        clips=2, candidates_per_clip=1, judgments_per_candidate=1, screen_out_code="SCREENED7"
    )
    token, participation = crowd_join(campaign, PID)
    worker = worker_client(token)
    answers = {}

    def ask_for_a_clip() -> None:
        try:
            answers["next"] = worker.post(NEXT)
        finally:
            connections.close_all()

    asking = threading.Thread(target=ask_for_a_clip)
    with transaction.atomic():
        # The exclusion holds the participation's row lock until this block commits.
        worker_exclude(participation=participation, actor=None, reason="test")
        asking.start()
        deadline = time.monotonic() + 20
        while not _waiting_on_a_lock():
            assert time.monotonic() < deadline, "next never waited for the participation lock"
            assert asking.is_alive(), answers
            time.sleep(0.05)
    asking.join(20)

    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.EXCLUDED
    response = answers["next"]
    assert response.status_code == 403
    assert response.json() == {
        "detail": "Based on your answers so far, this study has no further clips for you. Thank "
        "you for your time.",
        "state": "screened_out",
        "platform": "prolific",
        "screen_out_code": "SCREENED7",
        "redirect_url": None,
        "instruction": "Please return to Prolific and enter this screen-out code, so that your "
        "submission is recorded as screened out.",
    }
    assert Assignment.objects.filter(participation=participation).count() == 0
    assert set(CampaignCandidate.objects.values_list("slots_taken", flat=True)) == {0}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("code", "redirect", "instruction"),
    [
        (
            "SCREENED7",
            "",
            "Please return to Prolific and enter this screen-out code, so that your submission "
            "is recorded as screened out.",
        ),
        (
            "",
            "https://app.prolific.com/submissions/complete?cc=OUT",
            "Please return to Prolific with the link below, so that your submission is recorded "
            "as screened out.",
        ),
        (
            "SCREENED7",
            "https://app.prolific.com/submissions/complete?cc=OUT",
            "Please return to Prolific with this screen-out code or the link below, so that your "
            "submission is recorded as screened out.",
        ),
        ("", "", "Please return to Prolific and return your submission there."),
    ],
)
def test_the_screen_out_text_names_only_the_code_and_link_there_are(code, redirect, instruction):
    campaign = crowd_campaign(
        clips=1, screen_out_code=code, screen_out_redirect_url=redirect, slug="out"
    )
    token, participation = crowd_join(campaign, PID)
    worker_exclude(participation=participation, actor=None, reason="test")

    body = worker_client(token).post(NEXT).json()

    assert body == {**screen_out_payload(participation=participation), "instruction": instruction}
    assert body["screen_out_code"] == (code or None)
    assert body["redirect_url"] == (redirect or None)
