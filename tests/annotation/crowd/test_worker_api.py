"""The worker API contract, status code by status code (join, next, submit, me)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.crowd.api.worker import (
    JoinThrottle,
    NextAssignmentSerializer,
    NextThrottle,
    SubmitThrottle,
)
from annotation.crowd.services.workers import invite_token_make, token_hash
from annotation.models import (
    Assignment,
    AssignmentStatus,
    CampaignCandidate,
    CampaignClip,
    CampaignStatus,
    Judgment,
    Participation,
    ParticipationStatus,
    Worker,
)
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign, crowd_join

pytestmark = pytest.mark.django_db

NEXT = "/api/v1/worker/assignments/next"
ME = "/api/v1/worker/me"


def submit_url(assignment_id: int) -> str:
    return f"/api/v1/worker/assignments/{assignment_id}/submit"


def worker_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Worker {token}")
    return client


def join(slug: str, **body) -> tuple[int, dict]:
    response = APIClient().post(f"/api/v1/campaigns/{slug}/join", body, format="json")
    return response.status_code, response.json()


@pytest.fixture
def campaign():
    return crowd_campaign(clips=3, candidates_per_clip=2, judgments_per_candidate=2)


@pytest.fixture
def worker_a(campaign):
    token, _participation = crowd_join(campaign, "worker-a")
    return worker_client(token)


@pytest.fixture
def worker_b(campaign):
    token, _participation = crowd_join(campaign, "worker-b")
    return worker_client(token)


# --- join ---------------------------------------------------------------------------------------


def test_prolific_join_returns_a_working_token_and_records_the_session(campaign):
    status, body = join(
        campaign.slug,
        platform="prolific",
        external_id="5f1e2d3c4b5a697887766554",
        study_id="study-9",
        session_id="session-9",
    )

    assert status == 200
    assert list(body) == ["worker_token"]
    participation = Participation.objects.get(token_hash=token_hash(body["worker_token"]))
    assert participation.worker.platform == "prolific"
    assert participation.worker.external_id == "5f1e2d3c4b5a697887766554"
    assert participation.platform_data == {"study_id": "study-9", "session_id": "session-9"}
    assert participation.consented_at is not None
    assert worker_client(body["worker_token"]).post(NEXT).status_code == 200


def test_joining_again_maps_to_the_same_worker_and_returns_a_working_token(campaign):
    _s, first = join(campaign.slug, platform="mturk", external_id="A1WORKER", hit_id="H1")
    _s, second = join(campaign.slug, platform="mturk", external_id="A1WORKER", hit_id="H1")

    assert first["worker_token"] == second["worker_token"]
    assert Worker.objects.filter(platform="mturk", external_id="A1WORKER").count() == 1
    assert Participation.objects.filter(campaign=campaign).count() == 1
    assert worker_client(first["worker_token"]).get(ME).status_code == 200


def test_the_same_external_id_on_two_campaigns_is_one_worker(campaign):
    other = crowd_campaign(clips=1, slug="other")
    join(campaign.slug, platform="prolific", external_id="pid1")
    join(other.slug, platform="prolific", external_id="pid1")

    assert Worker.objects.filter(external_id="pid1").count() == 1
    assert Participation.objects.filter(worker__external_id="pid1").count() == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"platform": "prolific"}, "external_id"),
        ({"platform": "prolific", "external_id": "  "}, "external_id"),
        ({"platform": "imported", "external_id": "x"}, "platform"),
        ({"external_id": "x"}, "platform"),
        ({"platform": "invite"}, "invite_token"),
        ({"platform": "prolific", "external_id": "x" * 201}, "external_id"),
    ],
)
def test_join_with_an_invalid_body_is_400_with_field_errors(campaign, body, field):
    status, errors = join(campaign.slug, **body)

    assert status == 400
    assert field in errors
    assert Worker.objects.count() == 0


def test_join_unknown_campaign_is_404():
    status, _body = join("no-such-campaign", platform="prolific", external_id="PID1")
    assert status == 404
    assert Worker.objects.count() == 0


@pytest.mark.parametrize("state", [CampaignStatus.CLOSED, CampaignStatus.DRAFT])
def test_join_a_campaign_that_is_not_open_is_409(campaign, state):
    campaign.status = state
    campaign.save()

    status, body = join(campaign.slug, platform="prolific", external_id="PID1")

    assert status == 409
    assert body == {"detail": "This campaign is not open for new workers."}
    assert Participation.objects.count() == 0


def test_invite_join_takes_the_invitee_from_the_signed_invite(campaign):
    token = invite_token_make(
        campaign=campaign, invitee="alice@lab", expires_at=timezone.now() + timedelta(days=1)
    )

    status, body = join(campaign.slug, platform="invite", invite_token=token)
    again_status, again = join(
        campaign.slug, platform="invite", invite_token=token, external_id="alice@lab"
    )

    assert (status, again_status) == (200, 200)
    assert body == again
    assert Worker.objects.get().external_id == "alice@lab"
    assert Worker.objects.get().platform == "invite"


def test_invite_with_a_mismatching_external_id_is_400(campaign):
    token = invite_token_make(
        campaign=campaign, invitee="alice", expires_at=timezone.now() + timedelta(days=1)
    )
    status, body = join(campaign.slug, platform="invite", invite_token=token, external_id="mallory")
    assert status == 400
    assert body == {"external_id": ["external_id does not match the invite."]}
    assert Worker.objects.count() == 0


def test_forged_expired_or_foreign_invites_are_403(campaign):
    other = crowd_campaign(clips=1, slug="other")
    valid = invite_token_make(
        campaign=campaign, invitee="alice", expires_at=timezone.now() + timedelta(days=1)
    )
    forged = valid[:-3] + ("aaa" if not valid.endswith("aaa") else "bbb")
    expired = invite_token_make(
        campaign=campaign, invitee="alice", expires_at=timezone.now() - timedelta(seconds=1)
    )
    foreign = invite_token_make(
        campaign=other, invitee="alice", expires_at=timezone.now() + timedelta(days=1)
    )

    answers = [
        join(campaign.slug, platform="invite", invite_token=token)
        for token in (forged, expired, foreign)
    ]

    assert answers == [
        (403, {"detail": "This invite link is not valid."}),
        (403, {"detail": "This invite link has expired."}),
        (403, {"detail": "This invite link belongs to another campaign."}),
    ]
    assert Worker.objects.count() == 0


def test_join_is_throttled_per_address(campaign, monkeypatch):
    cache.clear()
    monkeypatch.setattr(JoinThrottle, "rate", "2/min", raising=False)
    codes = [join(campaign.slug, platform="prolific", external_id=f"P{n}")[0] for n in range(3)]
    cache.clear()
    assert codes == [200, 200, 429]
    assert Worker.objects.count() == 2


# --- next ---------------------------------------------------------------------------------------


def test_next_without_or_with_a_bad_token_is_401(campaign):
    assert APIClient().post(NEXT).status_code == 401
    assert worker_client("not-a-token").post(NEXT).status_code == 401
    response = APIClient().post(NEXT, HTTP_AUTHORIZATION="Worker")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Worker"
    assert Assignment.objects.count() == 0


def test_next_returns_the_contract_shape(campaign, worker_a):
    response = worker_a.post(NEXT)

    assert response.status_code == 200
    body = response.json()
    assert list(body) == [
        "assignment_id",
        "expires_at",
        "clip",
        "references",
        "candidates",
        "questions",
    ]
    assert NextAssignmentSerializer(data=body).is_valid()
    assignment = Assignment.objects.get(pk=body["assignment_id"])
    assert body["expires_at"] == assignment.expires_at.isoformat().replace("+00:00", "Z")
    assert list(body["clip"]) == [
        "id",
        "modality",
        "video_url",
        "image_url",
        "poster_url",
        "duration",
    ]
    assert (body["clip"]["modality"], body["clip"]["image_url"]) == ("video", None)
    assert body["clip"]["id"] == assignment.clip_id
    assert body["clip"]["duration"] == 1.5
    assert body["clip"]["video_url"].startswith(f"/media/s/clips/{assignment.clip.vatex_id}.mp4?e=")
    assert body["clip"]["poster_url"].startswith("/media/s/posters/")
    assert len(body["references"]) == 2
    assert sorted(candidate["id"] for candidate in body["candidates"]) == sorted(
        CampaignCandidate.objects.filter(campaign=campaign, clip_id=assignment.clip_id).values_list(
            "id", flat=True
        )
    )
    assert [question["key"] for question in body["questions"]] == [
        "descriptiveness",
        "relevance",
        "fluency",
    ]
    # A new campaign's per-criterion rubric: each question's own level descriptions.
    assert body["questions"][0]["levels"][0] == {
        "value": 1,
        "label": "Bad",
        "description": "Says almost nothing about what happens in the clip.",
    }
    assert body["questions"][2]["levels"][0] == {
        "value": 1,
        "label": "Bad",
        "description": "Broken or incomprehensible text.",
    }


def test_next_omits_references_in_reference_free_campaigns(campaign, worker_a):
    campaign.reference_free = True
    campaign.save()
    body = worker_a.post(NEXT).json()
    assert "references" not in body


def test_next_twice_gives_the_same_live_assignment(worker_a):
    first = worker_a.post(NEXT).json()
    second = worker_a.post(NEXT).json()
    assert second["assignment_id"] == first["assignment_id"]
    assert second["candidates"] == first["candidates"]
    assert Assignment.objects.count() == 1


def test_next_is_204_when_nothing_is_left_for_this_worker(campaign, worker_a):
    for _ in range(3):
        body = worker_a.post(NEXT).json()
        assert (
            worker_a.post(
                submit_url(body["assignment_id"]),
                {"ratings": all_candidate_ratings(body)},
                format="json",
            ).status_code
            == 201
        )

    response = worker_a.post(NEXT)

    assert response.status_code == 204
    assert response.content == b""


def test_next_answers_the_screen_out_at_once_for_an_excluded_worker(campaign, worker_a):
    campaign.screen_out_code = "SCREENED7"
    campaign.screen_out_redirect_url = "https://app.prolific.com/submissions/complete?cc=SCREENED7"
    campaign.save()
    Participation.objects.update(status=ParticipationStatus.EXCLUDED)

    response = worker_a.post(NEXT)

    assert response.status_code == 403
    body = response.json()
    assert body["state"] == "screened_out"
    assert body["platform"] == "prolific"
    assert body["screen_out_code"] == "SCREENED7"
    assert body["redirect_url"] == campaign.screen_out_redirect_url
    assert "Prolific" in body["instruction"]
    assert Assignment.objects.count() == 0  # no clip is handed out
    # `me` and a join again say the same (a reload of the page shows the screen-out).
    assert worker_a.get(ME).json() == body
    status, joined = join(
        campaign.slug,
        platform="prolific",
        external_id="worker-a",
        study_id="study-1",
        session_id="session-worker-a",
    )
    assert (status, joined) == (403, body)


def test_an_excluded_mturk_worker_is_told_to_return_the_hit_and_gets_no_code(campaign, settings):
    settings.LEPUS_CHECK_WORKER_IDS = False
    campaign.screen_out_code = "SCREENED7"
    campaign.save()
    status, joined = join(campaign.slug, platform="mturk", external_id="A1B2C3D4E5F6G7")
    assert status == 200
    Participation.objects.update(status=ParticipationStatus.EXCLUDED)

    response = worker_client(joined["worker_token"]).post(NEXT)

    assert response.status_code == 403
    body = response.json()
    assert body["platform"] == "mturk"
    assert body["screen_out_code"] is None and body["redirect_url"] is None
    assert "return this HIT" in body["instruction"]


def test_next_is_204_for_a_paused_worker(campaign, worker_a):
    Participation.objects.update(status=ParticipationStatus.PAUSED)
    assert worker_a.post(NEXT).status_code == 204
    assert Assignment.objects.count() == 0


def test_next_is_throttled_per_worker(campaign, worker_a, worker_b, monkeypatch):
    cache.clear()
    monkeypatch.setattr(NextThrottle, "rate", "2/min", raising=False)
    codes_a = [worker_a.post(NEXT).status_code for _ in range(3)]
    code_b = worker_b.post(NEXT).status_code
    cache.clear()
    assert codes_a == [200, 200, 429]
    assert code_b == 200


def test_submit_is_throttled_per_worker(worker_a, monkeypatch):
    body = worker_a.post(NEXT).json()
    submission = {"ratings": all_candidate_ratings(body)}
    cache.clear()
    monkeypatch.setattr(SubmitThrottle, "rate", "1/min", raising=False)
    codes = [
        worker_a.post(submit_url(body["assignment_id"]), submission, format="json").status_code
        for _ in range(2)
    ]
    cache.clear()
    assert codes == [201, 429]
    assert Judgment.objects.count() == 2


def test_a_worker_token_opens_no_curator_api(worker_a):
    assert worker_a.get("/api/v1/campaigns/").status_code == 403


# --- submit -------------------------------------------------------------------------------------


def test_submit_stores_one_judgment_per_candidate_with_timing(
    campaign, worker_a, monkeypatch, django_capture_on_commit_callbacks
):
    published = []
    monkeypatch.setattr(
        "annotation.tasks.quality_catch_up.apply_async",
        lambda args, kwargs, retry: published.append(args),
    )
    body = worker_a.post(NEXT).json()
    ratings = all_candidate_ratings(body, value=5)
    ratings[0]["relevance"] = 2

    with django_capture_on_commit_callbacks(execute=True):
        response = worker_a.post(
            submit_url(body["assignment_id"]),
            {"ratings": ratings, "client_timing": {"active_ms": 30000, "video_played_ms": 1500}},
            format="json",
        )

    assert response.status_code == 201
    result = response.json()
    assignment = Assignment.objects.get(pk=body["assignment_id"])
    assert result == {
        "assignment_id": assignment.pk,
        "status": "submitted",
        "judgments": 2,
        "submitted_at": assignment.submitted_at.isoformat().replace("+00:00", "Z"),
    }
    assert assignment.status == AssignmentStatus.SUBMITTED
    assert assignment.client_active_ms == 30000
    assert assignment.client_video_played_ms == 1500
    assert assignment.server_ms == int(
        (assignment.submitted_at - assignment.issued_at).total_seconds() * 1000
    )
    judgments = {j.campaign_candidate_id: j for j in Judgment.objects.all()}
    assert set(judgments) == {candidate["id"] for candidate in body["candidates"]}
    first = judgments[ratings[0]["candidate_id"]]
    assert first.values == {"descriptiveness": 5, "relevance": 2, "fluency": 5}
    assert first.client_active_ms == 15000
    assert first.client_video_played_ms == 1500
    assert first.server_ms == assignment.server_ms // 2
    assert first.assignment_id == assignment.pk
    participation = Participation.objects.get()
    assert participation.assignments_submitted == 1
    assert participation.active_ms_total == 30000
    # Slots: the live slot became a kept judgment, so slots_taken stays 1 per candidate.
    assert set(
        CampaignCandidate.objects.filter(pk__in=judgments).values_list("slots_taken", flat=True)
    ) == {1}
    # The quality work is published after commit, as one pass of the campaign.
    assert published == [(assignment.campaign_id,)]


def test_an_identical_repeat_is_200_with_the_same_body_and_nothing_stored_twice(worker_a):
    body = worker_a.post(NEXT).json()
    submission = {"ratings": all_candidate_ratings(body), "client_timing": {"active_ms": 5}}
    first = worker_a.post(submit_url(body["assignment_id"]), submission, format="json")

    repeat = worker_a.post(submit_url(body["assignment_id"]), submission, format="json")

    assert (first.status_code, repeat.status_code) == (201, 200)
    assert repeat.json() == first.json()
    assert Judgment.objects.count() == 2
    assert Participation.objects.get().assignments_submitted == 1


def test_a_different_repeat_is_409_and_the_first_submission_stands(worker_a):
    body = worker_a.post(NEXT).json()
    worker_a.post(
        submit_url(body["assignment_id"]),
        {"ratings": all_candidate_ratings(body, value=4)},
        format="json",
    )

    response = worker_a.post(
        submit_url(body["assignment_id"]),
        {"ratings": all_candidate_ratings(body, value=1)},
        format="json",
    )

    assert response.status_code == 409
    assert set(Judgment.objects.values_list("values__relevance", flat=True)) == {4}


def _invalid_cases(body):
    ids = [candidate["id"] for candidate in body["candidates"]]
    good = all_candidate_ratings(body)

    def changed(index, **fields):
        ratings = json.loads(json.dumps(good))
        ratings[index].update(fields)
        return {"ratings": ratings}

    without_question = json.loads(json.dumps(good))
    del without_question[1]["fluency"]
    return [
        (changed(0, relevance=6), {"ratings[0].relevance": ["Must be one of 1, 2, 3, 4, 5."]}),
        (changed(0, relevance=0), {"ratings[0].relevance": ["Must be one of 1, 2, 3, 4, 5."]}),
        (changed(1, fluency="5"), {"ratings[1].fluency": ["Must be one of 1, 2, 3, 4, 5."]}),
        (changed(1, fluency=True), {"ratings[1].fluency": ["Must be one of 1, 2, 3, 4, 5."]}),
        (changed(1, fluency=4.0), {"ratings[1].fluency": ["Must be one of 1, 2, 3, 4, 5."]}),
        ({"ratings": without_question}, {"ratings[1].fluency": ["This field is required."]}),
        (
            {"ratings": good[:1]},
            {"ratings": [f"Missing ratings for candidates: {good[1]['candidate_id']}."]},
        ),
        (
            {"ratings": [*good, {**good[0]}]},
            {"ratings[2].candidate_id": ["Duplicate rating for this candidate."]},
        ),
        (
            {"ratings": [*good, {**good[0], "candidate_id": max(ids) + 1000}]},
            {"ratings[2].candidate_id": ["Not a candidate of this assignment."]},
        ),
        (changed(0, clarity=3), {"ratings[0].clarity": ["Unknown field."]}),
        (
            changed(0, reason="x" * 2001),
            {"ratings[0].reason": ["Ensure this field has no more than 2000 characters."]},
        ),
        (changed(0, reason=5), {"ratings[0].reason": ["Expected a string."]}),
        ({}, {"ratings": ["This field is required."]}),
        ({"ratings": "all fives"}, {"ratings": ["Expected a list of ratings."]}),
        (
            {"ratings": good, "client_timing": {"active_ms": -1}},
            {
                "client_timing.active_ms": [
                    "Expected an integer number of milliseconds between 0 and 604800000."
                ]
            },
        ),
        ({"ratings": good, "client_timing": "fast"}, {"client_timing": ["Expected an object."]}),
        ({"ratings": good, "bonus": 1}, {"bonus": ["Unknown field."]}),
    ]


def test_invalid_submissions_are_400_with_field_errors_and_store_nothing(worker_a):
    body = worker_a.post(NEXT).json()
    url = submit_url(body["assignment_id"])

    for submission, errors in _invalid_cases(body):
        response = worker_a.post(url, submission, format="json")
        assert (response.status_code, response.json()) == (400, errors), submission

    assert worker_a.post(url, [1, 2], format="json").json() == {
        "non_field_errors": ["Expected a JSON object."]
    }
    malformed = worker_a.post(url, "{not json", content_type="application/json")
    assert malformed.status_code == 400
    assert Judgment.objects.count() == 0
    assert Assignment.objects.get().status == AssignmentStatus.LIVE
    assert Participation.objects.get().assignments_submitted == 0


def test_a_reason_is_required_at_or_below_the_campaign_threshold(campaign, worker_a):
    campaign.reason_required_at_or_below = 2
    campaign.save()
    body = worker_a.post(NEXT).json()
    ratings = all_candidate_ratings(body, value=3)
    ratings[1]["fluency"] = 2
    url = submit_url(body["assignment_id"])

    refused = worker_a.post(url, {"ratings": ratings}, format="json")
    ratings[1]["reason"] = "  Two verbs in a row.  "
    accepted = worker_a.post(url, {"ratings": ratings}, format="json")

    assert refused.status_code == 400
    assert refused.json() == {
        "ratings[1].reason": ["A reason is required when a rating is 2 or lower."]
    }
    assert accepted.status_code == 201
    assert Judgment.objects.get(campaign_candidate_id=ratings[1]["candidate_id"]).reason == (
        "Two verbs in a row."
    )


def test_someone_elses_or_an_unknown_assignment_is_404(worker_a, worker_b):
    body = worker_a.post(NEXT).json()
    submission = {"ratings": all_candidate_ratings(body)}

    foreign = worker_b.post(submit_url(body["assignment_id"]), submission, format="json")
    unknown = worker_a.post(submit_url(body["assignment_id"] + 999), submission, format="json")

    assert (foreign.status_code, unknown.status_code) == (404, 404)
    assert foreign.json() == {"detail": "No such assignment."}
    assert Judgment.objects.count() == 0


def test_submit_without_a_token_is_401(worker_a):
    body = worker_a.post(NEXT).json()
    response = APIClient().post(
        submit_url(body["assignment_id"]), {"ratings": all_candidate_ratings(body)}, format="json"
    )
    assert response.status_code == 401
    assert Judgment.objects.count() == 0


def _lapse(assignment_id: int) -> None:
    from annotation.crowd.services.assignment import assignments_expire

    Assignment.objects.filter(pk=assignment_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert assignments_expire() == 1


def test_a_late_submit_is_accepted_while_the_slots_are_free(campaign, worker_a):
    body = worker_a.post(NEXT).json()
    _lapse(body["assignment_id"])
    clip_id = Assignment.objects.get(pk=body["assignment_id"]).clip_id
    assert CampaignClip.objects.get(campaign=campaign, clip_id=clip_id).open_slots == 4

    response = worker_a.post(
        submit_url(body["assignment_id"]), {"ratings": all_candidate_ratings(body)}, format="json"
    )

    assert response.status_code == 201
    assert Assignment.objects.get(pk=body["assignment_id"]).status == AssignmentStatus.SUBMITTED
    assert Judgment.objects.count() == 2
    assert CampaignClip.objects.get(campaign=campaign, clip_id=clip_id).open_slots == 2
    assert set(
        CampaignCandidate.objects.filter(campaign=campaign, clip_id=clip_id).values_list(
            "slots_taken", flat=True
        )
    ) == {1}


def test_a_late_submit_is_409_once_others_took_the_slots(campaign, worker_a):
    campaign.judgments_per_candidate = 1
    campaign.save()
    CampaignCandidate.objects.filter(campaign=campaign).update(quota=1)
    CampaignClip.objects.filter(campaign=campaign).update(open_slots=2)
    body = worker_a.post(NEXT).json()
    _lapse(body["assignment_id"])
    token_c, _p = crowd_join(campaign, "worker-c")
    taken = worker_client(token_c).post(NEXT).json()
    assert sorted(c["id"] for c in taken["candidates"]) == sorted(
        c["id"] for c in body["candidates"]
    )

    response = worker_a.post(
        submit_url(body["assignment_id"]), {"ratings": all_candidate_ratings(body)}, format="json"
    )

    assert response.status_code == 409
    assert response.json() == {
        "detail": "This assignment expired and its clip has since been given to other workers, "
        "so these ratings could not be stored. Please continue with the next clip."
    }
    assert Judgment.objects.count() == 0
    assert Assignment.objects.get(pk=body["assignment_id"]).status == AssignmentStatus.EXPIRED
    assert Participation.objects.get(worker__external_id="worker-a").assignments_submitted == 0
    clip_id = Assignment.objects.get(pk=body["assignment_id"]).clip_id
    assert set(
        CampaignCandidate.objects.filter(campaign=campaign, clip_id=clip_id).values_list(
            "slots_taken", flat=True
        )
    ) == {1}


def test_an_excluded_worker_cannot_submit(worker_a):
    body = worker_a.post(NEXT).json()
    Participation.objects.update(status=ParticipationStatus.EXCLUDED)

    response = worker_a.post(
        submit_url(body["assignment_id"]), {"ratings": all_candidate_ratings(body)}, format="json"
    )

    assert response.status_code == 403  # the screen-out: no view runs for an excluded worker
    assert response.json()["state"] == "screened_out"
    assert Judgment.objects.count() == 0
    assert Assignment.objects.get().status == AssignmentStatus.LIVE


def test_an_oversized_body_is_413(worker_a, settings):
    body = worker_a.post(NEXT).json()
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    ratings = all_candidate_ratings(body, reason="y" * 1900)

    response = worker_a.post(submit_url(body["assignment_id"]), {"ratings": ratings}, format="json")

    assert response.status_code == 413
    assert Judgment.objects.count() == 0


def test_captions_are_returned_verbatim_for_the_page_to_escape(campaign, worker_a):
    from datasets_app.models import CandidateCaption

    CandidateCaption.objects.update(text='<img src=x onerror="alert(1)"> a cat')
    body = worker_a.post(NEXT).json()
    assert {candidate["text"] for candidate in body["candidates"]} == {
        '<img src=x onerror="alert(1)"> a cat'
    }


# --- me -----------------------------------------------------------------------------------------


def test_me_reports_progress_then_the_completion_code(campaign, worker_a):
    campaign.completion_code = "C0DE42"
    campaign.redirect_url = "https://app.prolific.com/submissions/complete?cc=C0DE42"
    campaign.save()

    start = worker_a.get(ME).json()
    body = worker_a.post(NEXT).json()
    during = worker_a.get(ME).json()
    worker_a.post(
        submit_url(body["assignment_id"]), {"ratings": all_candidate_ratings(body)}, format="json"
    )
    for _ in range(2):
        more = worker_a.post(NEXT).json()
        worker_a.post(
            submit_url(more["assignment_id"]),
            {"ratings": all_candidate_ratings(more)},
            format="json",
        )
    assert worker_a.post(NEXT).status_code == 204
    end = worker_a.get(ME).json()

    assert start == {
        "campaign": campaign.slug,
        "state": "working",
        "assignments_done": 0,
        "remaining_estimate": 3,
        "live_assignment_id": None,
        "max_assignments": None,
        "completion_code": None,
        "redirect_url": None,
    }
    assert during["live_assignment_id"] == body["assignment_id"]
    assert during["remaining_estimate"] == 2
    assert end == {
        "campaign": campaign.slug,
        "state": "finished",
        "assignments_done": 3,
        "remaining_estimate": 0,
        "live_assignment_id": None,
        "max_assignments": None,
        "completion_code": "C0DE42",
        "redirect_url": "https://app.prolific.com/submissions/complete?cc=C0DE42",
    }
    assert Participation.objects.get().completed_at is not None


def test_me_without_work_done_gives_no_code(campaign, worker_a, worker_b):
    campaign.completion_code = "C0DE42"
    campaign.judgments_per_candidate = 1
    campaign.save()
    CampaignCandidate.objects.filter(campaign=campaign).update(slots_taken=F_quota())
    CampaignClip.objects.filter(campaign=campaign).update(open_slots=0)

    body = worker_a.get(ME).json()

    assert body["state"] == "no_work"
    assert body["completion_code"] is None


def F_quota():
    from django.db.models import F

    return F("quota")


def test_me_for_a_stopped_worker(worker_a):
    Participation.objects.update(status=ParticipationStatus.PAUSED)
    body = worker_a.get(ME).json()
    assert body["state"] == "stopped"
    assert body["completion_code"] is None


def test_me_without_a_token_is_401():
    assert APIClient().get(ME).status_code == 401


# --- schema -------------------------------------------------------------------------------------


def test_the_worker_api_is_in_the_openapi_schema(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    paths = schema["paths"]
    assert "post" in paths["/api/v1/campaigns/{slug}/join"]
    assert "post" in paths["/api/v1/worker/assignments/next"]
    assert "post" in paths["/api/v1/worker/assignments/{assignment_id}/submit"]
    assert "get" in paths["/api/v1/worker/me"]
    next_op = paths["/api/v1/worker/assignments/next"]["post"]
    assert set(next_op["responses"]) >= {"200", "204", "401"}
    assert next_op["security"] == [{"workerToken": []}]
    assert schema["components"]["securitySchemes"]["workerToken"]["in"] == "header"


# --- a whole cycle: reload, replay, late submit ------------------------------------------------


def test_a_whole_cycle_keeps_the_contract(campaign, worker_a, worker_b):
    first = worker_a.post(NEXT).json()
    again = worker_a.post(NEXT).json()
    assert again["assignment_id"] == first["assignment_id"]
    assert len(first["references"]) == 2
    submission = {"ratings": all_candidate_ratings(first), "client_timing": {"active_ms": 10}}
    created = worker_a.post(submit_url(first["assignment_id"]), submission, format="json")
    repeated = worker_a.post(submit_url(first["assignment_id"]), submission, format="json")
    assert (created.status_code, repeated.status_code) == (201, 200)
    assert repeated.json() == created.json()

    late = worker_b.post(NEXT).json()
    assert late["clip"]["id"] == first["clip"]["id"]  # nearly complete first
    _lapse(late["assignment_id"])
    accepted = worker_b.post(
        submit_url(late["assignment_id"]), {"ratings": all_candidate_ratings(late)}, format="json"
    )
    assert accepted.status_code == 201
    assert Judgment.objects.count() == 4
    assert set(CampaignCandidate.objects.values_list("slots_taken", flat=True)) <= {0, 1, 2}
    for clip in CampaignClip.objects.all():
        assert clip.open_slots == sum(
            c.quota - c.slots_taken for c in CampaignCandidate.objects.filter(clip_id=clip.clip_id)
        )
    Participation.objects.filter(worker__external_id="worker-b").update(
        status=ParticipationStatus.PAUSED
    )
    assert worker_b.post(NEXT).status_code == 204


# --- exclusion: leases and the screen-out ------------------------------------------------------


def test_excluding_a_worker_releases_their_lease_so_another_worker_gets_the_clip_at_once():
    from annotation.quality.exclusions import worker_exclude

    campaign = crowd_campaign(clips=1, candidates_per_clip=2, judgments_per_candidate=1)
    campaign.screen_out_code = "SCREENED7"
    campaign.save()
    token_a, participation_a = crowd_join(campaign, "worker-a")
    token_b, _participation_b = crowd_join(campaign, "worker-b")
    worker_a, worker_b = worker_client(token_a), worker_client(token_b)
    held = worker_a.post(NEXT).json()
    assert worker_b.post(NEXT).status_code == 204  # the only clip is leased to A

    worker_exclude(participation=participation_a, actor=None, reason="test")

    lease = Assignment.objects.get(pk=held["assignment_id"])
    assert lease.status == AssignmentStatus.EXPIRED  # ended at once, not in 15 minutes
    assert set(CampaignCandidate.objects.values_list("slots_taken", flat=True)) == {0}
    assert CampaignClip.objects.get().open_slots == 2
    given = worker_b.post(NEXT)
    assert given.status_code == 200
    assert given.json()["clip"]["id"] == held["clip"]["id"]
    # A's submit of the clip it held answers the screen-out; nothing is stored.
    late = worker_a.post(
        submit_url(held["assignment_id"]), {"ratings": all_candidate_ratings(held)}, format="json"
    )
    assert late.status_code == 403
    assert late.json()["screen_out_code"] == "SCREENED7"
    assert Judgment.objects.count() == 0
    assert worker_a.post(NEXT).json()["state"] == "screened_out"
    assert Assignment.objects.filter(participation=participation_a).count() == 1


def test_a_worker_excluded_by_the_after_submission_pass_gets_no_further_clip():
    """The next request after a QC exclusion already knows: the screen-out, never a clip."""
    from annotation.tasks import after_submission

    campaign = crowd_campaign(clips=3, candidates_per_clip=2, judgments_per_candidate=1)
    campaign.qc_rules = {"uniform": {"min_assignments": 1, "max_uniform_share": 0.5}}
    campaign.screen_out_code = "SCREENED7"
    campaign.save()
    token, participation = crowd_join(campaign, "worker-a")
    worker = worker_client(token)
    first = worker.post(NEXT).json()
    worker.post(
        submit_url(first["assignment_id"]), {"ratings": all_candidate_ratings(first)}, format="json"
    )
    after_submission(first["assignment_id"])  # the pass a Celery worker runs after the submit

    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.EXCLUDED
    response = worker.post(NEXT)
    assert response.status_code == 403
    assert response.json()["screen_out_code"] == "SCREENED7"
    assert Assignment.objects.filter(participation=participation).count() == 1
