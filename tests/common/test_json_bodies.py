"""One JSON parser for every body (issue 25, point 4): `common.parsers.json_parse` is what the
API's parser runs, and the views outside DRF that read JSON from a request — the preview's join
and submit, the demo webhook receiver, the campaign form's custom questions, the data browser's
cursor — go through it too. Before, the preview endpoints answered a 120,000-deep body with a
500 (RecursionError); the gunicorn replay of every route is in
tests/hardening/test_production_hardening.py."""

from __future__ import annotations

import base64
import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from annotation.crowd.services.preview import preview_token_issue
from annotation.models import Campaign
from common.parsers import MAX_JSON_DEPTH, JSONInvalid, json_parse
from tests.annotation.crowd_factories import crowd_campaign

pytestmark = pytest.mark.django_db

DEPTH = 120_000
NESTED = "[" * DEPTH + "]" * DEPTH
TOO_DEEP = f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels."


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (NESTED, f"nested deeper than {MAX_JSON_DEPTH} levels."),
        ("[" * DEPTH, f"nested deeper than {MAX_JSON_DEPTH} levels."),
        ('{"a": 1e999}', "number out of range: 1e999"),
        ('["\\u0000"]', "strings may not contain NUL (\\u0000) characters."),
        ('["\\ud800"]', "strings may not contain unpaired surrogates (\\ud800-\\udfff)."),
        (b"\xff[]", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
        ("[1,]", "Expecting value: line 1 column 4 (char 3)"),
        ("NaN", "Out of range float values are not JSON compliant: 'NaN'"),
    ],
)
def test_json_parse_refuses_what_no_view_may_store(raw, reason):
    with pytest.raises(JSONInvalid) as refused:
        json_parse(raw)
    assert str(refused.value) == reason
    assert refused.value.detail == f"JSON parse error - {reason}"


def test_json_parse_reads_what_the_views_send():
    deepest = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_parse(b'{"ratings": [{"value": 4.5}]}') == {"ratings": [{"value": 4.5}]}
    assert json_parse(deepest) == json.loads(deepest)
    assert json_parse('"[[[[ is text"') == "[[[[ is text"


def _preview(campaign: Campaign, curator) -> tuple[str, dict[str, str]]:  # type: ignore[no-untyped-def]
    token = preview_token_issue(campaign=campaign, user=curator)
    return token, {"HTTP_AUTHORIZATION": f"Worker {token}"}


def test_the_preview_endpoints_answer_a_deep_body_with_the_parsers_400(curator):
    campaign = crowd_campaign(slug="deep-preview", clips=1, candidates_per_clip=1)
    token, header = _preview(campaign, curator)
    join = reverse("annotation:preview-join", args=[campaign.slug])
    submit = reverse("annotation:preview-submit", args=[campaign.slug, 1])
    script = Client()

    joined = script.post(join, NESTED, content_type="application/json")
    submitted = script.post(submit, NESTED, content_type="application/json", **header)
    unstorable = script.post(submit, '{"ratings": "\\u0000"}', "application/json", **header)
    still_joins = script.post(join, {"preview_token": token}, content_type="application/json")

    assert (joined.status_code, submitted.status_code) == (400, 400)
    assert joined.json() == submitted.json() == {"detail": TOO_DEEP}
    assert unstorable.status_code == 400
    assert unstorable.json() == {
        "detail": "JSON parse error - strings may not contain NUL (\\u0000) characters."
    }
    assert still_joins.status_code == 200


def test_the_demo_receiver_records_a_deep_body_as_text(settings, tmp_path):
    settings.LEPUS_DEMO_WEBHOOK_RECEIVER = "http://127.0.0.1:8000"
    settings.VAR_DIR = tmp_path

    answer = Client().post(
        "/dashboard/webhooks/demo-receiver/deliver/", NESTED, content_type="application/json"
    )

    assert answer.status_code == 200
    assert answer.json() == {"received": "", "signature_valid": False}
    [line] = (tmp_path / "demo-webhook-receiver.jsonl").read_text().splitlines()
    assert json.loads(line)["payload"] == NESTED[:2000]


def test_the_campaign_form_refuses_deep_custom_questions(curator_client):
    form = {
        "slug": "deep-questions",
        "name": "Deep",
        "status": "active",
        "question_preset": "custom",
        "questions_json": "[" * DEPTH,
        "judgments_per_candidate": "3",
        "lease_seconds": "900",
        "min_seconds_on_clip": "0",
        "pay_per_assignment": "0",
        "currency": "GBP",
    }

    # Multipart: URL-encoding would triple the brackets past the request size limit.
    response = curator_client.post("/dashboard/campaigns/new/", form)

    assert response.status_code == 200
    assert f"Not valid JSON: nested deeper than {MAX_JSON_DEPTH} levels." in re.sub(
        r"\s+", " ", response.content.decode()
    )
    assert not Campaign.objects.filter(slug="deep-questions").exists()


def test_a_browser_cursor_goes_through_the_parser(curator_client):
    deep = base64.urlsafe_b64encode(
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)).encode()
    )
    shallow = base64.urlsafe_b64encode(b"[1,2]")

    refused = curator_client.get(f"/dashboard/datasets/judgments/?after={deep.decode()}")
    accepted = curator_client.get(f"/dashboard/datasets/judgments/?after={shallow.decode()}")

    assert (refused.status_code, accepted.status_code) == (400, 200)
