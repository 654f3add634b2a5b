"""Campaigns: the service (selection, counters, edits), the curator API, the dashboard pages, the
admin and the create_campaign / create_curator commands."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from annotation.crowd.services.assignment import assignment_claim_next
from annotation.crowd.services.campaigns import (
    CampaignInvalid,
    campaign_counters_rebuild,
    campaign_create,
    campaign_update,
)
from annotation.models import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    CampaignStatus,
)
from annotation.questions import default_questions, overall_only_questions
from common.permissions import is_curator
from datasets_app.models import CandidateKind, ClipStatus, ControlType, ImportBatch
from tests.annotation.crowd_factories import (
    clips_with_candidates,
    crowd_campaign,
    crowd_join,
    ready_clip,
)
from tests.factories import CandidateFactory, JudgmentFactory, SystemFactory

pytestmark = pytest.mark.django_db


def _counters(campaign) -> dict[int, tuple[int, int]]:
    return {
        clip_id: (candidates, open_slots)
        for clip_id, candidates, open_slots in CampaignClip.objects.filter(
            campaign=campaign
        ).values_list("clip_id", "candidates", "open_slots")
    }


# --- service ------------------------------------------------------------------------------------


def test_campaign_over_all_model_outputs_with_defaults():
    clips = clips_with_candidates(clips=3, candidates_per_clip=2)
    control_clip = clips[0]
    CandidateFactory(
        clip=control_clip,
        kind=CandidateKind.CONTROL,
        control_type=ControlType.REFERENCE,
        system=None,
    )

    campaign = campaign_create(slug="all", name="All of it")

    assert campaign.questions == default_questions()
    assert campaign.judgments_per_candidate == 3
    assert campaign.reference_free is False
    assert campaign.status == CampaignStatus.ACTIVE
    assert CampaignCandidate.objects.filter(campaign=campaign).count() == 6  # controls not selected
    assert set(CampaignCandidate.objects.values_list("quota", flat=True)) == {3}
    assert _counters(campaign) == {clip.pk: (2, 6) for clip in clips}
    assert campaign.selection == {}


def test_selection_by_system_batch_clip_list_and_limit():
    batch = ImportBatch.objects.create(kind="candidates", file_name="a.jsonl", sha256="a" * 64)
    mine = SystemFactory(name="mine", version="1")
    theirs = SystemFactory(name="theirs", version="1")
    clip_1, clip_2, clip_3 = ready_clip(), ready_clip(), ready_clip()
    pending = CandidateFactory(system=mine, clip__status=ClipStatus.PENDING).clip
    for clip in (clip_1, clip_2, clip_3, pending):
        CandidateFactory(clip=clip, system=mine, import_batch=batch)
        CandidateFactory(clip=clip, system=theirs)

    by_system = campaign_create(slug="by-system", name="s", system_names=["theirs"])
    by_batch = campaign_create(slug="by-batch", name="b", import_batch_ids=[batch.pk])
    by_list = campaign_create(
        slug="by-list", name="l", clip_vatex_ids=[clip_2.vatex_id, clip_3.vatex_id]
    )
    limited = campaign_create(slug="limited", name="n", clip_limit=2, system_names=["mine"])

    def candidate_systems(campaign):
        return sorted(
            CampaignCandidate.objects.filter(campaign=campaign).values_list(
                "candidate__system__name", flat=True
            )
        )

    assert candidate_systems(by_system) == ["theirs"] * 4
    assert CampaignCandidate.objects.filter(campaign=by_batch).count() == 4
    assert set(CampaignClip.objects.filter(campaign=by_list).values_list("clip_id", flat=True)) == {
        clip_2.pk,
        clip_3.pk,
    }
    limited_clips = set(
        CampaignClip.objects.filter(campaign=limited).values_list("clip_id", flat=True)
    )
    assert len(limited_clips) == 2
    assert pending.pk not in limited_clips  # ready clips first
    assert limited.selection == {"clip_limit": 2, "systems": ["mine"]}


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"slug": "Bad Slug"}, "slug"),
        ({"slug": "new"}, "slug"),
        ({"slug": "ok", "name": ""}, "name"),
        ({"slug": "ok", "judgments_per_candidate": 0}, "judgments_per_candidate"),
        ({"slug": "ok", "questions": []}, "questions"),
        ({"slug": "ok", "questions": [{"key": "Bad Key"}]}, "questions[0].key"),
        ({"slug": "ok", "questions": [{"key": "a"}, {"key": "a"}]}, "questions[1].key"),
        ({"slug": "ok", "clip_vatex_ids": ["nope_000001_000002"]}, "clips"),
        ({"slug": "ok", "lease_seconds": 5}, "lease_seconds"),
        ({"slug": "ok", "currency": "pounds"}, "currency"),
        ({"slug": "ok", "redirect_url": "javascript:alert(1)"}, "redirect_url"),
        ({"slug": "ok", "redirect_url": "http://example.org/done"}, "redirect_url"),
        (
            {"slug": "ok", "screen_out_redirect_url": "http://example.org/out"},
            "screen_out_redirect_url",
        ),
        ({"slug": "ok", "screen_out_redirect_url": "https:///no-host"}, "screen_out_redirect_url"),
        ({"slug": "ok", "screen_out_code": "x" * 101}, "screen_out_code"),
        ({"slug": "ok", "colour": "red"}, "colour"),
        ({"slug": "ok", "prolific_study_id": "study-1"}, "prolific_study_id"),
        ({"slug": "ok", "mturk_hit_id": "3XY-Z"}, "mturk_hit_id"),
    ],
)
def test_invalid_campaigns_are_refused_and_nothing_is_created(arguments, field):
    # (With DEBUG off, as in production, return URLs must be https.)
    clips_with_candidates(clips=1)
    arguments = {"name": "A campaign", **arguments}
    with pytest.raises(CampaignInvalid) as refused:
        campaign_create(**arguments)
    assert field in refused.value.errors
    assert Campaign.objects.count() == 0
    assert CampaignCandidate.objects.count() == 0


def test_a_duplicate_slug_is_refused():
    crowd_campaign(clips=1, slug="pilot")
    with pytest.raises(CampaignInvalid) as refused:
        campaign_create(slug="pilot", name="Again")
    assert refused.value.errors == {"slug": ["A campaign 'pilot' exists already."]}


def test_changing_judgments_per_candidate_moves_quotas_and_counters():
    campaign = crowd_campaign(clips=2, candidates_per_clip=2, judgments_per_candidate=2)
    _t, participation = crowd_join(campaign, "w1")
    taken = assignment_claim_next(participation=participation).clip_id
    other = CampaignClip.objects.filter(campaign=campaign).exclude(clip_id=taken).get().clip_id

    campaign_update(campaign=campaign, judgments_per_candidate=5)
    assert _counters(campaign) == {taken: (2, 8), other: (2, 10)}

    campaign_update(campaign=campaign, judgments_per_candidate=1)
    # Never below what is already taken.
    assert dict(
        CampaignCandidate.objects.filter(campaign=campaign)
        .values_list("clip_id", "quota")
        .distinct()
    ) == {taken: 1, other: 1}
    assert _counters(campaign) == {taken: (2, 0), other: (2, 2)}


def test_questions_and_condition_are_frozen_once_workers_rated():
    campaign = crowd_campaign(clips=1)
    campaign_update(campaign=campaign, questions=overall_only_questions(), reference_free=True)
    campaign.refresh_from_db()
    assert campaign.question_keys == ["overall"]
    JudgmentFactory(campaign_candidate=CampaignCandidate.objects.filter(campaign=campaign).first())

    with pytest.raises(CampaignInvalid) as refused:
        campaign_update(campaign=campaign, questions=default_questions(), reference_free=False)

    assert set(refused.value.errors) == {"questions", "reference_free"}
    campaign.refresh_from_db()
    assert campaign.question_keys == ["overall"]
    assert campaign.reference_free is True
    # Other settings still change.
    campaign_update(campaign=campaign, pay_per_assignment="0.35", completion_code="ABC")
    campaign.refresh_from_db()
    assert (str(campaign.pay_per_assignment), campaign.completion_code) == ("0.35", "ABC")


def test_counters_rebuild_repairs_drift():
    campaign = crowd_campaign(clips=2, candidates_per_clip=3)
    CampaignClip.objects.filter(campaign=campaign).update(open_slots=1, candidates=7)
    assert campaign_counters_rebuild(campaign=campaign) == 2
    assert set(_counters(campaign).values()) == {(3, 9)}


# --- curator API --------------------------------------------------------------------------------


def test_curator_api_creates_reads_updates_and_deletes(curator_client):
    clips = clips_with_candidates(clips=2, candidates_per_clip=2)
    body = {
        "slug": "api-made",
        "name": "Made by API",
        "judgments_per_candidate": 4,
        "reference_free": True,
        "clips": [clips[0].vatex_id],
        "pay_per_assignment": "0.40",
        "completion_code": "XYZ",
    }

    created = curator_client.post("/api/v1/campaigns/", body, content_type="application/json")
    listed = curator_client.get("/api/v1/campaigns/")
    patched = curator_client.patch(
        "/api/v1/campaigns/api-made/",
        {"status": "paused", "min_seconds_on_clip": 10},
        content_type="application/json",
    )
    deleted = curator_client.delete("/api/v1/campaigns/api-made/")

    assert created.status_code == 201
    data = created.json()
    figures = data["figures"]
    assert (data["slug"], figures["candidates"], data["clips"], figures["slots_total"]) == (
        "api-made",
        2,
        1,
        8,
    )
    assert data["reference_free"] is True
    assert data["pay_per_assignment"] == "0.40"
    assert data["worker_url"] == "/w/api-made/"
    assert [row["slug"] for row in listed.json()] == ["api-made"]
    assert patched.status_code == 200
    assert (patched.json()["status"], patched.json()["min_seconds_on_clip"]) == ("paused", 10)
    assert deleted.status_code == 204
    assert Campaign.objects.count() == 0


def test_curator_api_refuses_bad_input_and_deleting_worked_campaigns(curator_client):
    campaign = crowd_campaign(clips=1, slug="busy")
    crowd_join(campaign, "w1")

    bad = curator_client.post(
        "/api/v1/campaigns/",
        {"slug": "x", "name": "X", "clips": ["nope"]},
        content_type="application/json",
    )
    delete = curator_client.delete("/api/v1/campaigns/busy/")

    assert bad.status_code == 400
    assert bad.json() == {"clips": ["Unknown clips: nope."]}
    assert delete.status_code == 409
    assert Campaign.objects.filter(slug="busy").exists()


def test_campaign_api_is_curator_only(client, outsider):
    crowd_campaign(clips=1, slug="secret")
    assert client.get("/api/v1/campaigns/").status_code == 403
    client.force_login(outsider)
    assert client.get("/api/v1/campaigns/").status_code == 403
    assert (
        client.post(
            "/api/v1/campaigns/", {"slug": "x", "name": "X"}, content_type="application/json"
        ).status_code
        == 403
    )
    assert client.delete("/api/v1/campaigns/secret/").status_code == 403
    assert Campaign.objects.filter(slug="secret").exists()


def test_invite_api_makes_a_link_that_joins(curator_client):
    campaign = crowd_campaign(clips=1, slug="invited")

    response = curator_client.post(
        "/api/v1/campaigns/invited/invites",
        {"invitee": "alice@example.org", "valid_days": 2},
        content_type="application/json",
    )

    assert response.status_code == 201
    data = response.json()
    assert data["invite_url"].startswith("http://testserver/w/invited/?invite=")
    joined = curator_client.post(
        f"/api/v1/campaigns/{campaign.slug}/join",
        {"platform": "invite", "invite_token": data["invite_token"]},
        content_type="application/json",
    )
    assert joined.status_code == 200


# --- commands -----------------------------------------------------------------------------------


def test_create_campaign_command_prints_the_contract_json():
    clips_with_candidates(clips=3, candidates_per_clip=2, system="alpha")
    clips_with_candidates(clips=2, candidates_per_clip=1, system="beta")
    out = StringIO()

    call_command(
        "create_campaign",
        "--slug",
        "cli",
        "--judgments-per-candidate",
        "5",
        "--clips",
        "2",
        "--system",
        "alpha",
        "--reference-free",
        "--json",
        stdout=out,
    )

    assert json.loads(out.getvalue()) == {"slug": "cli", "candidates": 4, "clips": 2}
    campaign = Campaign.objects.get(slug="cli")
    assert campaign.reference_free is True
    assert campaign.judgments_per_candidate == 5


def test_create_campaign_command_over_everything_and_its_errors():
    clips_with_candidates(clips=2, candidates_per_clip=3)
    out = StringIO()
    call_command("create_campaign", "--slug", "everything", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"slug": "everything", "candidates": 6, "clips": 2}
    with pytest.raises(CommandError, match="exists already"):
        call_command("create_campaign", "--slug", "everything", "--json", stdout=StringIO())


def test_create_curator_is_idempotent():
    first, second = StringIO(), StringIO()
    call_command(
        "create_curator", "--username", "cur", "--password", "pw-1-long", "--json", stdout=first
    )
    call_command(
        "create_curator", "--username", "cur", "--password", "pw-2-long", "--json", stdout=second
    )

    assert json.loads(first.getvalue()) == {"username": "cur", "created": True}
    assert json.loads(second.getvalue()) == {"username": "cur", "created": False}
    user = User.objects.get(username="cur")
    assert User.objects.filter(username="cur").count() == 1
    assert is_curator(user)
    assert user.check_password("pw-2-long")
    assert user.groups.count() == 1


def test_a_password_starting_with_a_dash_is_one_argument_as_the_demo_passes_it():
    # secrets.token_urlsafe() may begin with "-": the demo passes `--password=<value>`.
    call_command("create_curator", "--username", "dash", "--password=-Xy_9long", stdout=StringIO())
    assert User.objects.get(username="dash").check_password("-Xy_9long")


# --- dashboard pages ----------------------------------------------------------------------------


def test_campaign_list_page_shows_counts_and_links(curator_client):
    crowd_campaign(clips=2, candidates_per_clip=3, slug="shown")
    response = curator_client.get("/dashboard/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'href="/dashboard/campaigns/shown/"' in html
    assert 'href="/dashboard/campaigns/shown/edit/"' in html
    row = html[html.index('data-campaign="shown"') :]
    assert (
        '<span data-figure="slots_filled">0</span> / <span data-figure="slots_total">18</span>'
        in row
    )


def test_dashboard_pages_are_curator_only(client, outsider):
    crowd_campaign(clips=1, slug="shown")
    urls = [
        "/dashboard/",
        "/dashboard/campaigns/new/",
        "/dashboard/campaigns/shown/edit/",
        "/dashboard/campaigns/shown/links/",
        "/dashboard/campaigns/shown/payments.csv",
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    client.force_login(outsider)
    assert [client.get(url).status_code for url in urls] == [403] * 5


def test_create_page_makes_a_campaign_through_the_service(curator_client, curator):
    clips = clips_with_candidates(clips=2, candidates_per_clip=2, system="sys-a")
    form = {
        "slug": "from-page",
        "name": "From the page",
        "status": "active",
        "question_preset": "overall",
        "judgments_per_candidate": "2",
        "lease_seconds": "600",
        "min_seconds_on_clip": "3",
        "reason_required_at_or_below": "2",
        "pay_per_assignment": "0.25",
        "currency": "usd",
        "completion_code": "CODE1",
        "systems": ["sys-a"],
        "clip_list": f"{clips[1].vatex_id}\n",
    }

    response = curator_client.post("/dashboard/campaigns/new/", form)

    assert response.status_code == 302
    assert response["Location"] == "/dashboard/campaigns/from-page/links/"
    campaign = Campaign.objects.get(slug="from-page")
    assert campaign.question_keys == ["overall"]
    assert (campaign.min_seconds_on_clip, campaign.reason_required_at_or_below) == (3, 2)
    assert (str(campaign.pay_per_assignment), campaign.currency) == ("0.25", "USD")
    assert campaign.created_by == curator
    assert list(
        CampaignClip.objects.filter(campaign=campaign).values_list("clip_id", flat=True)
    ) == [clips[1].pk]


def test_create_page_shows_service_errors(curator_client):
    response = curator_client.post(
        "/dashboard/campaigns/new/",
        {
            "slug": "bad",
            "name": "Bad",
            "status": "active",
            "question_preset": "custom",
            "questions_json": '[{"key": "Not OK"}]',
            "judgments_per_candidate": "3",
            "lease_seconds": "900",
            "min_seconds_on_clip": "0",
            "pay_per_assignment": "0",
            "currency": "GBP",
        },
    )
    assert response.status_code == 200
    assert "Lower-case letters, digits and _; start with a letter." in response.content.decode()
    assert Campaign.objects.count() == 0


def test_edit_page_updates_settings(curator_client):
    campaign = crowd_campaign(clips=1, slug="editable")
    page = curator_client.get("/dashboard/campaigns/editable/edit/")
    assert page.status_code == 200
    form = page.context["form"]
    data = {name: value for name, value in form.initial.items() if value is not None}
    data.update({"name": "Renamed", "judgments_per_candidate": "4", "redirect_url": ""})
    data["reference_free"] = "on"

    response = curator_client.post("/dashboard/campaigns/editable/edit/", data)

    assert response.status_code == 302
    campaign.refresh_from_db()
    assert (campaign.name, campaign.judgments_per_candidate, campaign.reference_free) == (
        "Renamed",
        4,
        True,
    )
    assert set(
        CampaignCandidate.objects.filter(campaign=campaign).values_list("quota", flat=True)
    ) == {4}


def test_links_page_gives_entry_links_and_makes_invites(curator_client):
    crowd_campaign(clips=1, slug="linked")
    page = curator_client.get("/dashboard/campaigns/linked/links/")
    html = page.content.decode()
    assert (
        "http://testserver/w/linked/?PROLIFIC_PID={{%PROLIFIC_PID%}}&amp;STUDY_ID={{%STUDY_ID%}}"
        "&amp;SESSION_ID={{%SESSION_ID%}}" in html
    )
    made = curator_client.post(
        "/dashboard/campaigns/linked/links/", {"invitee": "bob", "valid_days": "3"}
    )
    assert made.status_code == 200
    assert made.context["invite"]["url"].startswith("http://testserver/w/linked/?invite=")


# --- admin --------------------------------------------------------------------------------------


def test_admin_creates_campaigns_through_the_service(client, admin_user):
    clips = clips_with_candidates(clips=2, candidates_per_clip=2)
    client.force_login(admin_user)
    form = {
        "slug": "via-admin",
        "name": "Via admin",
        "description": "",
        "instructions": "",
        "status": "active",
        "questions": "",
        "overall_question_key": "",
        "judgments_per_candidate": "2",
        "lease_seconds": "900",
        "min_seconds_on_clip": "0",
        "control_rate": "0",
        "control_settings": "{}",
        "qc_rules": "{}",
        "review_range_threshold": "3",
        "pay_per_assignment": "0",
        "currency": "GBP",
        "completion_code": "",
        "redirect_url": "",
        "clip_list": clips[0].vatex_id,
        "systems": "",
    }

    response = client.post("/admin/annotation/campaign/add/", form)

    assert response.status_code == 302, response.content.decode()[:3000]
    campaign = Campaign.objects.get(slug="via-admin")
    assert campaign.questions == default_questions()
    assert campaign.created_by == admin_user
    assert _counters(campaign) == {clips[0].pk: (2, 4)}

    change = client.get(f"/admin/annotation/campaign/{campaign.pk}/change/")
    assert change.status_code == 200


def test_a_campaign_is_bound_to_its_study_through_the_api(curator_client):
    """The binding of issue 18 is a campaign setting like the others: set over the API (normalised),
    and a join from another study is refused."""
    clips_with_candidates(clips=1)
    study = "6470A1B2C3D4E5F601234567"
    created = curator_client.post(
        "/api/v1/campaigns/",
        {"slug": "bound", "name": "Bound", "prolific_study_id": study},
        content_type="application/json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["prolific_study_id"] == study.lower()
    assert Campaign.objects.get(slug="bound").prolific_study_id == study.lower()

    join = {"platform": "prolific", "external_id": "5f0c0ffee0ddba11c0ffee01", "session_id": "s"}
    other = curator_client.post(
        "/api/v1/campaigns/bound/join",
        {**join, "study_id": "0" * 24},
        content_type="application/json",
    )
    assert other.status_code == 403
    right = curator_client.post(
        "/api/v1/campaigns/bound/join", {**join, "study_id": study}, content_type="application/json"
    )
    assert right.status_code == 200


def test_screen_out_settings_are_stored_and_http_is_allowed_only_with_debug(settings):
    clips_with_candidates(clips=1)
    campaign = campaign_create(
        slug="screened",
        name="A campaign",
        screen_out_code=" SCREENED-9 ",
        screen_out_redirect_url="https://app.prolific.com/submissions/complete?cc=SCREENED-9",
    )
    assert campaign.screen_out_code == "SCREENED-9"
    assert campaign.screen_out_redirect_url.endswith("cc=SCREENED-9")
    settings.DEBUG = True  # a local demo
    demo = campaign_create(
        slug="local-demo", name="Demo", screen_out_redirect_url="http://127.0.0.1:8000/out"
    )
    assert demo.screen_out_redirect_url == "http://127.0.0.1:8000/out"
