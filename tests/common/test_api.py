"""API glue found by fuzzing (tests/hardening/test_schema_fuzz.py): JSON strings PostgreSQL cannot
store are a 400, paths the URL patterns refuse are JSON 404s under /api/, and the schema declares
the error answers every view can give."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from annotation.models import Campaign
from tests.annotation.crowd_factories import crowd_campaign

pytestmark = pytest.mark.django_db


def _patch(client: Client, slug: str, raw_body: str):  # type: ignore[no-untyped-def]
    return client.patch(f"/api/v1/campaigns/{slug}/", raw_body, content_type="application/json")


@pytest.mark.parametrize(
    ("raw_body", "message"),
    [
        ('{"control_settings": {"\\ud86f": [true]}}', "unpaired surrogates"),
        ('{"description": "ok", "qc_rules": {"note": "a\\ud800b"}}', "unpaired surrogates"),
        ('{"control_settings": {"key": "nul \\u0000 inside"}}', "NUL"),
    ],
)
def test_json_strings_postgresql_cannot_store_are_refused_and_nothing_changes(
    curator_client, raw_body, message
):
    campaign = crowd_campaign(slug="pilot", clips=1, candidates_per_clip=1)
    before = (campaign.control_settings, campaign.qc_rules, campaign.description)

    response = _patch(curator_client, campaign.slug, raw_body)

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert message in response.json()["detail"]
    campaign.refresh_from_db()
    assert (campaign.control_settings, campaign.qc_rules, campaign.description) == before


def test_a_surrogate_pair_is_ordinary_text(curator_client):
    crowd_campaign(slug="pilot", clips=1, candidates_per_clip=1)
    body = json.dumps({"description": "rabbit \U0001f407 caption"})  # ASCII: "\\ud83d\\udc07"
    assert "\\ud83d" in body

    response = _patch(curator_client, "pilot", body)

    assert response.status_code == 200, response.json()
    assert Campaign.objects.get(slug="pilot").description == "rabbit \U0001f407 caption"


@pytest.mark.parametrize(
    "path", ["/api/v1/releases/abc/", "/api/v1/campaigns/%C2%87%3A/join", "/api/v1/nothing"]
)
def test_a_path_no_api_pattern_matches_is_a_json_404(client, path):
    response = client.post(path, "{}", content_type="application/json")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found."}


def test_pages_keep_the_html_404(client):
    response = client.get("/dashboard/releases/abc/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_schema_declares_the_answers_every_view_can_give(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operations = schema["paths"]
    # Curator views: 403 (no session, no role, CSRF); 404 with a path parameter; 503 always.
    assert set(operations["/api/v1/campaigns/"]["get"]["responses"]) == {"200", "403", "503"}
    assert {"400", "403", "404", "503"} <= set(
        operations["/api/v1/campaigns/{slug}/"]["patch"]["responses"]
    )
    # Worker views answer 401 with a challenge, never the session's 403; their 403 is the
    # campaign's screen-out of a worker quality control excluded.
    me = set(operations["/api/v1/worker/me"]["get"]["responses"])
    assert me == {"200", "401", "403", "429", "503"}
    # Nullable relations are declared nullable.
    release = schema["components"]["schemas"]["Release"]["properties"]
    assert release["previous"]["nullable"] is True
    assert release["created_by"]["nullable"] is True


@pytest.mark.parametrize(
    "body",
    [
        {"review_range_threshold": 40000},  # PositiveSmallIntegerField
        {"reason_required_at_or_below": 32768},
        {"max_assignments_per_worker": 2**31},  # PositiveIntegerField
        {"lease_seconds": 2**31},
    ],
)
def test_numbers_beyond_the_column_are_field_errors_not_database_errors(curator_client, body):
    campaign = crowd_campaign(slug="pilot", clips=1, candidates_per_clip=1)

    response = _patch(curator_client, campaign.slug, json.dumps(body))

    assert response.status_code == 400
    assert list(response.json()) == list(body)
    refreshed = Campaign.objects.get(pk=campaign.pk)
    assert all(getattr(refreshed, field) == getattr(campaign, field) for field in body)
