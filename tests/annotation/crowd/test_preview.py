"""Preview as a worker: the curator's page is the worker's rating page with a banner, and its four
endpoints answer like the worker API (offers, validation, progress) while storing nothing."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from annotation.models import Campaign
from tests.annotation.crowd_factories import all_candidate_ratings, crowd_campaign

pytestmark = pytest.mark.django_db


def row_counts() -> dict[str, int]:
    """Rows of every table of the annotation and data apps."""
    return {
        model._meta.label: model.objects.count()
        for app in ("annotation", "datasets_app")
        for model in apps.get_app_config(app).get_models()
    }


def page_config(client: Client, campaign: Campaign) -> dict[str, Any]:
    response = client.get(reverse("annotation:preview", args=[campaign.slug]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Preview — nothing is stored" in html
    found = re.search(r'<script id="worker-config" type="application/json">(.*?)</script>', html)
    assert found is not None
    return json.loads(found.group(1))


def call(client: Client, method: str, url: str, token: str | None, body: Any = None) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Worker {token}"} if token else {}
    if method == "GET":
        return client.get(url, **headers)
    return client.post(
        url,
        data=json.dumps(body) if body is not None else "",
        content_type="application/json",
        **headers,
    )


def test_a_full_preview_stores_nothing(curator_client):
    campaign = crowd_campaign(clips=3, candidates_per_clip=2, reason_required_at_or_below=2)
    before = row_counts()
    config = page_config(curator_client, campaign)
    urls = config["urls"]
    # The script sends no cookie: a fresh client stands for it.
    script = Client()
    joined = call(script, "POST", urls["join"], None, config["join"])
    assert joined.status_code == 200
    token = joined.json()["worker_token"]
    me = call(script, "GET", urls["me"], token).json()
    assert me["state"] == "working" and me["remaining_estimate"] == 3
    offered_clips = []
    for number in (1, 2, 3):
        offer = call(script, "POST", urls["next"], token)
        assert offer.status_code == 200
        body = offer.json()
        assert body["assignment_id"] == number and len(body["candidates"]) == 2
        assert body["references"] and body["clip"]["video_url"]
        offered_clips.append(body["clip"]["id"])
        submit = urls["submit"].replace("{id}", str(number))
        # The worker API's validation: a low rating needs a reason, every candidate a rating.
        low = call(script, "POST", submit, token, {"ratings": all_candidate_ratings(body, 1)})
        assert low.status_code == 400 and any("reason" in key for key in low.json())
        partial = {"ratings": all_candidate_ratings(body, 4)[:1]}
        assert call(script, "POST", submit, token, partial).status_code == 400
        # The same offer again until it is passed; then the next clip.
        assert call(script, "POST", urls["next"], token).json()["assignment_id"] == number
        good = call(script, "POST", submit, token, {"ratings": all_candidate_ratings(body, 4)})
        assert good.status_code == 201 and good.json()["stored"] is False
        assert call(script, "POST", submit, token, {"ratings": []}).status_code == 404
    assert len(set(offered_clips)) == 3
    assert call(script, "POST", urls["next"], token).status_code == 204
    me = call(script, "GET", urls["me"], token).json()
    assert me["state"] == "finished" and me["assignments_done"] == 3
    assert me["redirect_url"] is None
    assert row_counts() == before


def test_preview_endpoints_refuse_without_a_valid_token(curator_client, client):
    campaign = crowd_campaign(clips=1, candidates_per_clip=1)
    other = crowd_campaign(clips=1, candidates_per_clip=1, slug="other")
    config = page_config(curator_client, campaign)
    urls = config["urls"]
    token = config["join"]["preview_token"]
    assert call(client, "POST", urls["next"], None).status_code == 401
    assert call(client, "POST", urls["next"], token[:-2] + "xx").status_code == 401
    assert call(client, "GET", urls["me"], "not-a-token").status_code == 401
    assert call(client, "POST", urls["join"], None, {"preview_token": "forged"}).status_code == 403
    assert call(client, "POST", urls["join"], None, {}).status_code == 400
    other_next = reverse("annotation:preview-next", args=[other.slug])
    assert call(client, "POST", other_next, token).status_code == 401
    # A curator who loses the role loses the preview too.
    User.objects.get(pk=curator_client.session["_auth_user_id"]).groups.clear()
    assert call(client, "POST", urls["next"], token).status_code == 401


def test_only_curators_open_the_preview(client, outsider):
    campaign = crowd_campaign(clips=1, candidates_per_clip=1)
    url = reverse("annotation:preview", args=[campaign.slug])
    assert client.get(url).status_code == 302
    client.force_login(outsider)
    assert client.get(url).status_code == 403
