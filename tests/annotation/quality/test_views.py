"""The quality pages and API: curators only, CSRF-protected changes, sortable tables, SVG charts,
and every view in the OpenAPI schema."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from annotation.models import (
    AuditEntry,
    Judgment,
    ParticipationStatus,
    QCRun,
    ReviewItem,
    ReviewStatus,
)
from annotation.quality.run import qc_campaign_full
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db

KEYS = ("descriptiveness", "relevance", "fluency")


@pytest.fixture
def quality_campaign():
    campaign = quality_crowd_campaign(slug="qdash", clips=3, candidates_per_clip=2, quota=3)
    items = list(campaign.items.order_by("id"))
    patterns = [(1, 2, 3), (5, 4, 3), (3, 3, 4)]
    for index, pattern in enumerate(patterns):
        worker = quality_worker(campaign, f"dash-{index}")
        for position, item in enumerate(items):
            values = {
                key: 1 + (value + position) % 5 for key, value in zip(KEYS, pattern, strict=True)
            }
            quality_judge(worker, item, values, server_ms=12_000 + 1000 * index)
    qc_campaign_full(campaign=campaign)
    return campaign


PAGES = [
    "/dashboard/campaigns/qdash/",
    "/dashboard/campaigns/qdash/workers/",
    "/dashboard/campaigns/qdash/review/",
    "/dashboard/campaigns/qdash/leaderboard/",
    "/dashboard/campaigns/qdash/audit/",
]


@pytest.mark.parametrize("path", PAGES)
def test_pages_are_for_curators_only(path, quality_campaign, client, outsider, curator):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")
    client.force_login(outsider)
    assert client.get(path).status_code == 403
    client.force_login(curator)
    page = client.get(path)
    assert page.status_code == 200
    html = page.content.decode()
    assert "cdn" not in html.lower() and '<script src="http' not in html


def test_review_item_page_and_posts_are_curator_only(quality_campaign, client, outsider):
    item = ReviewItem.objects.filter(campaign=quality_campaign).first()
    url = f"/dashboard/campaigns/qdash/review/{item.pk}/"
    assert client.get(url).status_code == 302
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    assert client.post(url + "resolve/", {"rating_relevance": "5"}).status_code == 403
    assert client.post(url + "claim/").status_code == 403
    item.refresh_from_db()
    assert item.status == ReviewStatus.OPEN and not AuditEntry.objects.exists()


def test_the_campaign_page_draws_charts_as_svg(quality_campaign, curator_client):
    html = curator_client.get("/dashboard/campaigns/qdash/").content.decode()
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img"') == 7
    assert "Judgments per day, last 30 days" in html
    assert "Krippendorff&#x27;s alpha of Relevance over time" in html
    assert "Ratings of Fluency (1 to 5)" in html
    assert "<strong>0</strong> of 6 candidates complete" not in html
    assert "6</strong> of 6 candidates complete" in html


def test_the_worker_table_sorts_and_explains(quality_campaign, curator_client):
    html = curator_client.get(
        "/dashboard/campaigns/qdash/workers/?sort=median_seconds&order=desc"
    ).content.decode()
    order = re.findall(r'data-worker="(dash-\d)"', html)
    assert order == ["dash-2", "dash-1", "dash-0"]
    assert 'aria-sort="descending"' in html
    assert "Below 1.0 the worker cannot have watched the whole clip." in html
    ascending = curator_client.get("/dashboard/campaigns/qdash/workers/?sort=median_seconds")
    assert re.findall(r'data-worker="(dash-\d)"', ascending.content.decode()) == [
        "dash-0",
        "dash-1",
        "dash-2",
    ]


def test_exclude_and_include_buttons_need_csrf_and_work_with_it(quality_campaign, curator):
    participation = quality_campaign.participations.get(worker__external_id="dash-1")
    url = f"/dashboard/campaigns/qdash/workers/{participation.pk}/exclude/"
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(curator)

    assert strict.post(url, {"reason": "no token"}).status_code == 403
    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.ACTIVE

    page = strict.get("/dashboard/campaigns/qdash/workers/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    response = strict.post(url, {"reason": "spot check", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.EXCLUDED
    assert Judgment.objects.filter(participation=participation, is_excluded=True).count() == 6

    include = f"/dashboard/campaigns/qdash/workers/{participation.pk}/include/"
    assert strict.post(include, {"csrfmiddlewaretoken": token}).status_code == 302
    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.ACTIVE
    assert not Judgment.objects.filter(participation=participation, is_excluded=True).exists()


def test_run_qc_button_queues_a_run(quality_campaign, curator_client):
    response = curator_client.post("/dashboard/campaigns/qdash/qc-runs/")
    assert response.status_code == 302
    run = QCRun.objects.get(campaign=quality_campaign)
    assert run.status == "queued" and run.requested_by.username == "curator"
    # A second click does not queue a second run while one is waiting.
    curator_client.post("/dashboard/campaigns/qdash/qc-runs/")
    assert QCRun.objects.filter(campaign=quality_campaign).count() == 1


# ----------------------------------------------------------------------------------------------
# API
# ----------------------------------------------------------------------------------------------

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
