"""The quality API (annotation/quality/api/): curators only, the review flow and worker actions,
and every view in the OpenAPI schema. The campaign `qdash` comes from the `quality_campaign`
fixture (tests/annotation/quality/conftest.py)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


API_GETS = [
    "/api/v1/campaigns/qdash/quality",
    "/api/v1/campaigns/qdash/quality/workers",
    "/api/v1/campaigns/qdash/quality/runs",
    "/api/v1/campaigns/qdash/agreement",
    "/api/v1/campaigns/qdash/review",
    "/api/v1/campaigns/qdash/audit",
    "/api/v1/campaigns/qdash/aggregates",
    "/api/v1/campaigns/qdash/leaderboard",
]


@pytest.mark.parametrize("path", API_GETS)
def test_api_is_for_curators_only(path, quality_campaign, outsider, curator):
    api = APIClient()
    assert api.get(path).status_code == 403
    api.force_authenticate(outsider)
    assert api.get(path).status_code == 403
    api.force_authenticate(curator)
    assert api.get(path).status_code == 200


def test_api_review_flow_and_worker_actions(quality_campaign, curator, second_curator):
    api = APIClient()
    api.force_authenticate(curator)
    queue = api.get("/api/v1/campaigns/qdash/review").json()
    assert queue["open"] == len(queue["items"]) > 0
    first = queue["items"][0]
    claimed = api.post("/api/v1/campaigns/qdash/review/claim-next").json()
    assert claimed["id"] == first["id"] and claimed["status"] == "claimed"

    other = APIClient()
    other.force_authenticate(second_curator)
    assert other.post(f"/api/v1/campaigns/qdash/review/{first['id']}/claim").status_code == 409
    assert (
        other.post(
            f"/api/v1/campaigns/qdash/review/{first['id']}/resolve",
            {"ratings": {"relevance": 4}},
            format="json",
        ).status_code
        == 409
    )
    bad = api.post(
        f"/api/v1/campaigns/qdash/review/{first['id']}/resolve",
        {"ratings": {"relevance": 9}},
        format="json",
    )
    assert bad.status_code == 400 and "ratings" in bad.json()

    detail = api.get(f"/api/v1/campaigns/qdash/review/{first['id']}").json()
    judgment = detail["judgments"][0]
    resolved = api.post(
        f"/api/v1/campaigns/qdash/review/{first['id']}/resolve",
        {
            "ratings": {"relevance": 4},
            "exclude": [{"judgment_id": judgment["id"], "reason": "off topic"}],
        },
        format="json",
    )
    assert resolved.status_code == 200
    body = resolved.json()
    assert body["item"]["status"] == "resolved"
    assert body["aggregate"]["means"]["relevance"] == 4.0
    assert body["aggregate"]["kept_judgments"] == 2
    assert [entry["action"] for entry in body["audit"]] == [
        "claim",
        "exclude_judgment",
        "set_ratings",
    ]

    undo = api.post(
        f"/api/v1/campaigns/qdash/audit/{body['audit'][2]['id']}/undo", {}, format="json"
    )
    assert undo.status_code == 200 and undo.json()["action"] == "undo"
    again = api.post(
        f"/api/v1/campaigns/qdash/audit/{body['audit'][2]['id']}/undo", {}, format="json"
    )
    assert again.status_code == 409

    participation = quality_campaign.participations.get(worker__external_id="dash-0")
    excluded = api.post(
        f"/api/v1/campaigns/qdash/quality/workers/{participation.pk}/exclude",
        {"reason": "api"},
        format="json",
    )
    assert excluded.json()["status"] == "excluded"
    included = api.post(
        f"/api/v1/campaigns/qdash/quality/workers/{participation.pk}/include", {}, format="json"
    )
    assert included.json()["status"] == "active"

    created = api.post(
        "/api/v1/campaigns/qdash/controls", {"rate": 1.0, "kinds": ["shuffled"]}, format="json"
    )
    assert created.status_code == 201 and created.json() == {"created": 3, "controls": 3}
    run = api.post("/api/v1/campaigns/qdash/quality/runs")
    assert run.status_code == 202 and run.json()["status"] == "queued"
    assert api.get(f"/api/v1/campaigns/qdash/quality/runs/{run.json()['id']}").status_code == 200
    assert api.get("/api/v1/campaigns/nope/quality").status_code == 404


def test_every_quality_view_is_in_the_openapi_schema(curator):
    api = APIClient()
    api.force_authenticate(curator)
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    for path in (
        "/api/v1/campaigns/{slug}/quality",
        "/api/v1/campaigns/{slug}/quality/workers",
        "/api/v1/campaigns/{slug}/quality/workers/{participation_id}/exclude",
        "/api/v1/campaigns/{slug}/quality/workers/{participation_id}/include",
        "/api/v1/campaigns/{slug}/quality/runs",
        "/api/v1/campaigns/{slug}/quality/runs/{run_id}",
        "/api/v1/campaigns/{slug}/agreement",
        "/api/v1/campaigns/{slug}/review",
        "/api/v1/campaigns/{slug}/review/claim-next",
        "/api/v1/campaigns/{slug}/review/{item_id}",
        "/api/v1/campaigns/{slug}/review/{item_id}/claim",
        "/api/v1/campaigns/{slug}/review/{item_id}/release",
        "/api/v1/campaigns/{slug}/review/{item_id}/resolve",
        "/api/v1/campaigns/{slug}/audit",
        "/api/v1/campaigns/{slug}/audit/{entry_id}/undo",
        "/api/v1/campaigns/{slug}/aggregates",
        "/api/v1/campaigns/{slug}/leaderboard",
        "/api/v1/campaigns/{slug}/controls",
    ):
        assert f"{path}:" in schema or f'"{path}"' in schema, path
