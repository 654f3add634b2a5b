"""The entry page /w/<slug>/ as the server renders it (the browser tests drive it for real)."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from annotation.crowd.services.workers import invite_token_make
from annotation.models import CampaignStatus, Participation
from tests.annotation.crowd_factories import crowd_campaign

pytestmark = pytest.mark.django_db


def config_of(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="worker-config" type="application/json">') + len(
        '<script id="worker-config" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


@pytest.fixture
def campaign():
    return crowd_campaign(
        clips=1,
        slug="pilot",
        min_seconds_on_clip=5,
        reason_required_at_or_below=2,
        description="Rate <b>captions</b> & help science.",
    )


def test_prolific_entry_renders_consent_rubric_and_the_join_body(client, campaign):
    response = client.get(
        "/w/pilot/?PROLIFIC_PID=5f1&STUDY_ID=s1&SESSION_ID=x1", HTTP_USER_AGENT="phone"
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "I agree — start" in html
    assert '<th scope="row">4 — Good</th>' in html
    assert "Rate &lt;b&gt;captions&lt;/b&gt; &amp; help science." in html
    assert 'src="/static/js/worker.js"' in html
    assert re.findall(r'(?:src|href)="([^"]+)"', html) == [
        "/static/favicon.svg",
        "/static/favicon.ico",
        "/static/css/lepus.css",
        "/static/css/worker.css",
        "/static/js/worker.js",
        "#",
        "/w/pilot/erase/",  # the end screen's erase link (docs/privacy.md)
        "/w/pilot/erase/",  # the same on the screen-out
    ]  # no CDN: everything the page loads is ours
    config = config_of(response)
    assert config["join"] == {
        "platform": "prolific",
        "external_id": "5f1",
        "study_id": "s1",
        "session_id": "x1",
    }
    assert config["identity"] == "prolific:5f1"
    assert config["minSecondsOnClip"] == 5
    assert config["reasonAtOrBelow"] == 2
    assert config["urls"] == {
        "join": "/api/v1/campaigns/pilot/join",
        "next": "/api/v1/worker/assignments/next",
        "me": "/api/v1/worker/me",
        "submit": "/api/v1/worker/assignments/{id}/submit",
    }
    assert [question["key"] for question in config["questions"]] == [
        "descriptiveness",
        "relevance",
        "fluency",
    ]
    assert response["Cache-Control"] == "no-store"
    assert "frame-ancestors 'self' https://www.mturk.com" in response["Content-Security-Policy"]
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert "X-Frame-Options" not in response
    # Rendering the page joins nobody: joining happens when the worker agrees.
    assert Participation.objects.count() == 0


def test_mturk_entry_and_preview(client, campaign):
    accepted = config_of(
        client.get(
            "/w/pilot/?workerId=A1&assignmentId=AS1&hitId=H1&turkSubmitTo=https://www.mturk.com"
        )
    )
    preview = client.get("/w/pilot/?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1")
    forged = config_of(
        client.get("/w/pilot/?workerId=A1&assignmentId=AS1&turkSubmitTo=https://evil.example")
    )

    assert accepted["join"] == {
        "platform": "mturk",
        "external_id": "A1",
        "assignment_id": "AS1",
        "hit_id": "H1",
        "turk_submit_to": "https://www.mturk.com",
    }
    assert accepted["mturk"] == {"submitTo": "https://www.mturk.com", "assignmentId": "AS1"}
    assert accepted["preview"] is False
    assert preview.status_code == 200
    assert config_of(preview)["preview"] is True
    assert "I agree — start" not in preview.content.decode()
    assert "This is a preview." in preview.content.decode()
    assert forged["mturk"]["submitTo"] == ""


def test_invite_entry_checks_the_invite(client, campaign):
    token = invite_token_make(
        campaign=campaign, invitee="alice", expires_at=timezone.now() + timedelta(hours=1)
    )
    good = client.get(f"/w/pilot/?invite={token}")
    bad = client.get("/w/pilot/?invite=forged")

    assert good.status_code == 200
    assert config_of(good)["join"] == {"platform": "invite", "invite_token": token}
    assert config_of(good)["identity"] == "invite:alice"
    assert bad.status_code == 403
    assert "This invite link is not valid." in bad.content.decode()


def test_entry_without_ids_unknown_or_closed_campaigns(client, campaign):
    missing = client.get("/w/pilot/")
    unknown = client.get("/w/nope/?PROLIFIC_PID=1")
    campaign.status = CampaignStatus.CLOSED
    campaign.save()
    closed = client.get("/w/pilot/?PROLIFIC_PID=1")

    assert missing.status_code == 400
    assert "missing your participant id" in missing.content.decode()
    assert unknown.status_code == 404
    assert closed.status_code == 200
    assert "not open at the moment" in closed.content.decode()


def test_caption_like_markup_in_parameters_is_escaped(client, campaign):
    response = client.get("/w/pilot/?PROLIFIC_PID=</script><script>alert(1)</script>")
    html = response.content.decode()
    assert "<script>alert(1)</script>" not in html
    assert config_of(response)["join"]["external_id"] == "</script><script>alert(1)</script>"


def test_an_excluded_worker_opening_the_link_gets_the_screen_out_page(client, campaign):
    from tests.annotation.crowd_factories import crowd_join

    campaign.screen_out_code = "SCREENED-9"
    campaign.screen_out_redirect_url = "https://app.prolific.com/submissions/complete?cc=SCREENED-9"
    campaign.save()
    _token, participation = crowd_join(campaign, "5f00000000000000000000dd")
    still_in = client.get("/w/pilot/?PROLIFIC_PID=5F00000000000000000000DD")
    Participation.objects.filter(pk=participation.pk).update(status="excluded")

    response = client.get("/w/pilot/?PROLIFIC_PID=5F00000000000000000000DD")

    assert still_in.status_code == 200 and "I agree — start" in still_in.content.decode()
    html = response.content.decode()
    assert response.status_code == 403
    assert "Your participation has ended" in html
    assert '<strong class="code">SCREENED-9</strong>' in html
    assert 'href="https://app.prolific.com/submissions/complete?cc=SCREENED-9"' in html
    assert "I agree — start" not in html and "worker-config" not in html
    assert response["Content-Security-Policy"].startswith("default-src 'self'")
