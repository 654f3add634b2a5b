"""One rule per campaign setting: every setting of `annotation.crowd.campaign_options` is walked through
the three ways a curator sets it — the service, the API (POST and PATCH) and the dashboard's
forms (new and edit) — at each bound (accepted, and stored) and just outside it (refused on that
setting, with the surface's message, and nothing stored). The table must name every setting each
surface offers, so a setting added to one surface alone fails here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from itertools import count
from typing import Any

import pytest
from django import forms
from django.core import validators
from django.core.exceptions import ValidationError
from django.db import models
from rest_framework import serializers

from annotation.crowd.api.campaigns import CampaignCreateSerializer, CampaignOptionsSerializer
from annotation.crowd.campaign_options import (
    ARGUMENT_FIELDS,
    CAMPAIGN_FIELDS,
    CAMPAIGN_OPTIONS,
    OPTION_FIELDS,
    OPTIONS_BY_NAME,
    CampaignOption,
    Kind,
)
from annotation.crowd.services.campaigns import CampaignInvalid, campaign_create, campaign_update
from annotation.crowd.views.campaigns import CampaignCreateForm, CampaignSettingsForm
from annotation.models import Campaign
from annotation.questions import Rubric, default_questions
from tests.annotation.crowd_factories import clips_with_candidates

# Campaign columns that are no curator's setting: written by the services or the database.
NOT_SETTINGS = {"id", "is_imported", "selection", "created_by", "created_at", "updated_at"}
# Settings without bounds to walk: free text, structured settings with services of their own
# (questions, controls, QC rules), the overall key (checked against the questions) and the slug
# (creation only; `test_campaigns` walks its rules).
UNBOUNDED = {
    "slug",
    "description",
    "instructions",
    "questions",
    "overall_question_key",
    "control_settings",
    "qc_rules",
    "allocation",  # a policy: walked on every surface below, `test_allocation_*`
}
# The page's own way to give the questions, and the candidate selection at creation.
PAGE_ONLY = {"question_preset", "questions_json"}
PAGE_SELECTION = {"import_batches", "systems", "clip_list", "clip_limit"}
API_SELECTION = {"import_batch_ids", "systems", "clips", "clip_limit"}


@dataclass(frozen=True)
class Probe:
    """A value for a setting and the bound it breaks: None (accepted), a bound the surfaces'
    fields check ("min_value", "max_value", "max_digits", "max_length", "min_length", "blank",
    "choice"), or "rule": a rule only the service knows (a pattern, a scheme)."""

    option: CampaignOption
    value: Any
    broken: str | None = None

    def __str__(self) -> str:
        shown = repr(self.value) if len(repr(self.value)) < 30 else f"{len(self.value)} chars"
        return f"{self.option.name}={shown}:{self.broken or 'ok'}"


def _probes(option: CampaignOption) -> list[Probe]:
    if option.kind in (Kind.INTEGER, Kind.NUMBER, Kind.DECIMAL):
        assert option.minimum is not None and option.maximum is not None
        step: Any = {Kind.INTEGER: 1, Kind.NUMBER: 0.01, Kind.DECIMAL: Decimal("0.01")}
        below, above = option.minimum - step[option.kind], option.maximum + step[option.kind]
        probes = [
            Probe(option, option.minimum),
            Probe(option, option.maximum),
            Probe(option, below, "min_value"),
            Probe(option, above, "max_digits" if option.kind == Kind.DECIMAL else "max_value"),
        ]
        return probes + ([Probe(option, None)] if option.nullable else [])
    if option.kind == Kind.CHOICE:
        return [Probe(option, value) for value in option.values] + [
            Probe(option, "nonsense", "choice")
        ]
    if option.kind == Kind.BOOLEAN:
        return [Probe(option, True), Probe(option, False)]
    if option.kind == Kind.URL:
        assert option.max_length is not None
        longest = "https://example.org/" + "a" * (option.max_length - 20)
        return [
            Probe(option, longest),
            Probe(option, longest + "a", "max_length"),
            Probe(option, "http://example.org/", "rule"),
            Probe(option, ""),
        ]
    if option.name == "metric":
        # Which runs and plug-ins exist is training_bridge's to say (test_campaign_metric.py):
        # here only the values refused before it is asked, and the empty metric.
        return [
            Probe(option, ""),
            Probe(option, "plugin:" + "a" * 94, "max_length"),
            Probe(option, "bleu4", "rule"),
            Probe(option, "rigel-run:0", "rule"),
        ]
    if option.kind in (Kind.TEXT, Kind.CODE) and option.max_length is not None:
        letter = "a" if option.case == "lower" else "A"
        probes = [
            Probe(option, letter * option.max_length),
            Probe(option, letter * (option.max_length + 1), "max_length"),
            Probe(option, "", None if option.blank else "blank"),
        ]
        if option.min_length and option.min_length > 1:
            probes.append(Probe(option, letter * (option.min_length - 1), "min_length"))
        return probes + RULE_PROBES.get(option.name, [])
    return []


# Values within the fields' lengths that only the service's pattern refuses (or accepts).
RULE_PROBES = {
    "currency": [Probe(OPTIONS_BY_NAME["currency"], "GB1", "rule")],
    "prolific_study_id": [
        Probe(OPTIONS_BY_NAME["prolific_study_id"], "a" * 23, "rule"),
        Probe(OPTIONS_BY_NAME["prolific_study_id"], "g" * 24, "rule"),
        Probe(OPTIONS_BY_NAME["prolific_study_id"], "ABCDEF0123456789abcdef01"),
    ],
    "mturk_hit_id": [
        Probe(OPTIONS_BY_NAME["mturk_hit_id"], "A" * 20),
        Probe(OPTIONS_BY_NAME["mturk_hit_id"], "A" * 19, "rule"),
        Probe(OPTIONS_BY_NAME["mturk_hit_id"], "AB-" * 8, "rule"),
    ],
}
PROBES = [probe for option in CAMPAIGN_OPTIONS for probe in _probes(option)]
_slugs = count()


# --- what each surface answers ------------------------------------------------------------------


def _service_message(probe: Probe) -> str:
    problem = probe.option.check(probe.value)[1]
    assert problem, f"the service accepts {probe}"
    return problem


def _api_message(probe: Probe) -> str:
    """DRF's own message for the bound the API's field checks (the service's for its rules)."""
    option, broken = probe.option, probe.broken
    messages = serializers.DecimalField.default_error_messages
    if broken == "min_value":
        return messages["min_value"].format(min_value=option.minimum)
    if broken == "max_value":
        return messages["max_value"].format(max_value=option.maximum)
    if broken == "max_digits":
        return messages["max_digits"].format(max_digits=option.max_digits)
    if broken in ("max_length", "min_length", "blank"):
        return serializers.CharField.default_error_messages[broken].format(
            max_length=option.max_length, min_length=option.min_length
        )
    if broken == "choice":
        return serializers.ChoiceField.default_error_messages["invalid_choice"].format(
            input=probe.value
        )
    return _service_message(probe)


def _django_message(validator: Any, value: Any) -> str:
    with pytest.raises(ValidationError) as refused:
        validator(value)
    return refused.value.messages[0]


def _page_message(probe: Probe) -> str:
    """Django's own message for the bound the form's field checks (the service's for its rules)."""
    option, broken, value = probe.option, probe.broken, probe.value
    if broken == "min_value":
        return _django_message(validators.MinValueValidator(option.minimum), value)
    if broken == "max_value":
        return _django_message(validators.MaxValueValidator(option.maximum), value)
    if broken == "max_digits":
        return _django_message(
            validators.DecimalValidator(option.max_digits, option.decimal_places), value
        )
    if broken == "max_length":
        return _django_message(validators.MaxLengthValidator(option.max_length), value)
    if broken == "min_length":
        return _django_message(validators.MinLengthValidator(option.min_length), value)
    if broken == "blank":
        return str(forms.Field.default_error_messages["required"])
    if broken == "choice":
        return str(forms.ChoiceField.default_error_messages["invalid_choice"]) % {"value": value}
    return _service_message(probe)


def _stored(probe: Probe) -> Any:
    field = Campaign._meta.get_field(probe.option.name)
    assert isinstance(field, models.Field)
    return field.to_python(probe.option.check(probe.value)[0])


def _posted(value: Any) -> Any:
    return "" if value is None else ("on" if value else "") if isinstance(value, bool) else value


def _with_levels(probe: Probe) -> bool:
    """A custom rubric takes the levels from the questions: give them."""
    return probe.option.name == "rubric" and probe.value == Rubric.CUSTOM


def _levelled_questions() -> list[dict[str, Any]]:
    return default_questions(Rubric.PER_CRITERION)


@pytest.fixture
def campaign(db) -> Campaign:  # type: ignore[no-untyped-def]
    clip = clips_with_candidates(clips=1, candidates_per_clip=1)[0]
    return campaign_create(slug="probed", name="Probed", clip_vatex_ids=[clip.vatex_id])


def _settings_of(campaign: Campaign) -> dict[str, Any]:
    campaign.refresh_from_db()
    return {name: getattr(campaign, name) for name in CAMPAIGN_FIELDS}


# --- the walk -----------------------------------------------------------------------------------


@pytest.mark.parametrize("probe", PROBES, ids=str)
def test_the_service_keeps_the_rule(campaign, probe):
    before = _settings_of(campaign)
    values = {probe.option.name: probe.value}
    if _with_levels(probe):
        values["questions"] = _levelled_questions()
    slug = f"made-{next(_slugs)}"
    create_values = {"name": "Made", **values}
    name = create_values.pop("name")
    if probe.broken is None:
        campaign_update(campaign=campaign, **values)
        made = campaign_create(slug=slug, name=name, **create_values)
        assert getattr(made, probe.option.name) == _stored(probe)
        assert _settings_of(campaign)[probe.option.name] == _stored(probe)
        return
    with pytest.raises(CampaignInvalid) as refused:
        campaign_update(campaign=campaign, **values)
    assert refused.value.errors == {probe.option.name: [_service_message(probe)]}
    with pytest.raises(CampaignInvalid) as refused:
        campaign_create(slug=slug, name=name, **create_values)
    assert refused.value.errors == {probe.option.name: [_service_message(probe)]}
    assert _settings_of(campaign) == before
    assert not Campaign.objects.filter(slug=slug).exists()


@pytest.mark.parametrize("probe", PROBES, ids=str)
def test_the_api_keeps_the_rule(curator_client, campaign, probe):
    before = _settings_of(campaign)
    body: dict[str, Any] = {probe.option.name: probe.value}
    if isinstance(probe.value, Decimal):
        body[probe.option.name] = str(probe.value)
    if _with_levels(probe):
        body["questions"] = _levelled_questions()
    slug = f"posted-{next(_slugs)}"
    patched = curator_client.patch(
        f"/api/v1/campaigns/{campaign.slug}/", body, content_type="application/json"
    )
    posted = curator_client.post(
        "/api/v1/campaigns/",
        {"slug": slug, "name": "Posted", **body},
        content_type="application/json",
    )
    if probe.broken is None:
        assert (patched.status_code, posted.status_code) == (200, 201), (
            patched.json(),
            posted.json(),
        )
        assert _settings_of(campaign)[probe.option.name] == _stored(probe)
        made = Campaign.objects.get(slug=slug)
        assert getattr(made, probe.option.name) == _stored(probe)
        return
    expected = {probe.option.name: [_api_message(probe)]}
    assert (patched.status_code, patched.json()) == (400, expected)
    assert (posted.status_code, posted.json()) == (400, expected)
    assert _settings_of(campaign) == before
    assert not Campaign.objects.filter(slug=slug).exists()


def _new_campaign_form() -> dict[str, str]:
    """The new-campaign page's required fields, under a fresh slug."""
    return {
        "slug": f"paged-{next(_slugs)}",
        "name": "Paged",
        "status": "active",
        "question_preset": "paper",
        "judgments_per_candidate": "3",
        "lease_seconds": "900",
        "min_seconds_on_clip": "0",
        "pay_per_assignment": "0",
        "currency": "GBP",
    }


@pytest.mark.parametrize("probe", [probe for probe in PROBES if probe.option.on_page], ids=str)
def test_the_pages_keep_the_rule(curator_client, campaign, probe):
    before = _settings_of(campaign)
    edit_url = f"/dashboard/campaigns/{campaign.slug}/edit/"
    edited = curator_client.get(edit_url).context["form"].initial
    edited = {name: _posted(value) for name, value in edited.items()}
    new = _new_campaign_form()
    for data in (edited, new):
        data[probe.option.name] = _posted(probe.value)
        if _with_levels(probe):
            data["question_preset"] = "custom"
            data["questions_json"] = json.dumps(_levelled_questions())
        for name in [name for name, value in data.items() if value == ""]:
            if OPTIONS_BY_NAME.get(name, OPTIONS_BY_NAME["name"]).kind == Kind.BOOLEAN:
                del data[name]  # an unticked box is absent from the post
    edit = curator_client.post(edit_url, edited)
    create = curator_client.post("/dashboard/campaigns/new/", new)
    if probe.broken is None:
        assert (edit.status_code, create.status_code) == (302, 302)
        assert _settings_of(campaign)[probe.option.name] == _stored(probe)
        made = Campaign.objects.get(slug=new["slug"])
        assert getattr(made, probe.option.name) == _stored(probe)
        return
    expected = {probe.option.name: [_page_message(probe)]}
    assert (edit.status_code, edit.context["form"].errors) == (200, expected)
    assert (create.status_code, create.context["form"].errors) == (200, expected)
    assert _settings_of(campaign) == before
    assert not Campaign.objects.filter(slug=new["slug"]).exists()


# --- the table covers every surface -------------------------------------------------------------


def test_every_curator_setting_of_the_model_has_a_rule():
    columns = {field.name for field in Campaign._meta.concrete_fields}
    assert columns - NOT_SETTINGS == set(CAMPAIGN_FIELDS)
    assert set(OPTION_FIELDS) | set(ARGUMENT_FIELDS) == set(CAMPAIGN_FIELDS)


def test_every_setting_with_bounds_is_walked():
    walked = {probe.option.name for probe in PROBES}
    assert walked == set(CAMPAIGN_FIELDS) - UNBOUNDED
    refused = {probe.option.name for probe in PROBES if probe.broken}
    assert refused == walked - {"reference_free"}


def test_the_api_takes_exactly_the_settings_with_rules():
    assert list(CampaignOptionsSerializer().fields) == [
        name for name in CAMPAIGN_FIELDS if name != "slug"
    ]
    assert set(CampaignCreateSerializer().fields) - API_SELECTION == set(CAMPAIGN_FIELDS)


def test_the_pages_offer_exactly_the_settings_marked_for_them():
    on_page = {option.name for option in CAMPAIGN_OPTIONS if option.on_page}
    # The page gives the questions as a preset or JSON, and the slug only at creation.
    assert set(CampaignSettingsForm.base_fields) - PAGE_ONLY == on_page - {"questions", "slug"}
    assert set(CampaignCreateForm.base_fields) - PAGE_ONLY - PAGE_SELECTION == on_page - {
        "questions"
    }


def test_the_service_refuses_a_setting_without_a_rule(campaign):
    with pytest.raises(CampaignInvalid) as refused:
        campaign_update(campaign=campaign, colour="blue")
    assert refused.value.errors == {"colour": ["Unknown campaign setting."]}


def test_the_bounds_the_surfaces_disagreed_on_are_the_services():
    bounds = {
        name: (OPTIONS_BY_NAME[name].minimum, OPTIONS_BY_NAME[name].maximum)
        for name in ("lease_seconds", "min_seconds_on_clip", "reason_required_at_or_below")
    }
    assert bounds == {
        "lease_seconds": (30, 7 * 24 * 3600),
        "min_seconds_on_clip": (0, 3600),
        "reason_required_at_or_below": (0, 100),
    }


# --- the allocation policy, walked on every surface ---------------------------------------------

ADAPTIVE_STORED = {
    "kind": "adaptive",
    "minimum": 2,
    "maximum": 4,
    "disagreement_range": 1,
    "standard_error_threshold": 0.5,
    "metric_disagreement_threshold": None,
    "review_range_threshold": 3,
}
# (value given, what is stored) or (value given, the service's message).
ALLOCATIONS_ACCEPTED = [
    ({}, {}),
    ({"kind": "fixed"}, {}),
    (
        {"kind": "adaptive", "minimum": 2, "maximum": 4, "disagreement_range": 1,
         "standard_error_threshold": 0.5, "metric_disagreement_threshold": None},
        ADAPTIVE_STORED,
    ),
    # The campaign's own review threshold may be given back (a GET's value PATCHed again).
    ({**ADAPTIVE_STORED}, ADAPTIVE_STORED),
]  # fmt: skip
ALLOCATIONS_REFUSED = [
    ({"kind": "bandit"}, "A judgment allocation policy: Unknown allocation policy 'bandit': "
     "fixed or adaptive."),
    ({"kind": "fixed", "judgments": 2},
     'The fixed policy takes judgments_per_candidate: give {} or {"kind": "fixed"}.'),
    ({"kind": "adaptive", "minimum": 3, "maximum": 2},
     "A judgment allocation policy: The maximum must not be below the minimum."),
    ({"kind": "adaptive", "maximum": 101}, "At most 100 judgments per candidate."),
    ({"kind": "adaptive", "disagreement_range": 3},
     "A judgment allocation policy: The disagreement range lies in 1 .. review range threshold "
     "- 1."),
    ({"kind": "adaptive", "review_range_threshold": 4},
     "The review threshold is the campaign's review_range_threshold (3): leave it out."),
    ({"kind": "adaptive", "minimum": "2"},
     "A judgment allocation policy: Minimum must be a whole number."),
    ([], "A judgment allocation policy: Expected an object."),
]  # fmt: skip


@pytest.mark.parametrize(("value", "stored"), ALLOCATIONS_ACCEPTED)
def test_allocation_the_service_and_the_api_store_a_policy(curator_client, campaign, value, stored):
    campaign_update(campaign=campaign, allocation=value)
    campaign.refresh_from_db()
    assert campaign.allocation == stored
    made = campaign_create(slug=f"made-{next(_slugs)}", name="Made", allocation=value)
    assert made.allocation == stored
    patched = curator_client.patch(
        f"/api/v1/campaigns/{campaign.slug}/",
        {"allocation": value},
        content_type="application/json",
    )
    assert (patched.status_code, patched.json()["allocation"]) == (200, stored)
    posted = curator_client.post(
        "/api/v1/campaigns/",
        {"slug": f"posted-{next(_slugs)}", "name": "Posted", "allocation": value},
        content_type="application/json",
    )
    assert (posted.status_code, posted.json()["allocation"]) == (201, stored)


@pytest.mark.parametrize(("value", "message"), ALLOCATIONS_REFUSED)
def test_allocation_the_service_and_the_api_refuse_a_broken_policy(
    curator_client, campaign, value, message
):
    before = _settings_of(campaign)
    with pytest.raises(CampaignInvalid) as refused:
        campaign_update(campaign=campaign, allocation=value)
    assert refused.value.errors == {"allocation": [message]}
    slug = f"made-{next(_slugs)}"
    with pytest.raises(CampaignInvalid) as refused:
        campaign_create(slug=slug, name="Made", allocation=value)
    assert refused.value.errors == {"allocation": [message]}
    patched = curator_client.patch(
        f"/api/v1/campaigns/{campaign.slug}/",
        {"allocation": value},
        content_type="application/json",
    )
    assert (patched.status_code, patched.json()) == (400, {"allocation": [message]})
    posted = curator_client.post(
        "/api/v1/campaigns/",
        {"slug": slug, "name": "Posted", "allocation": value},
        content_type="application/json",
    )
    assert (posted.status_code, posted.json()) == (400, {"allocation": [message]})
    assert _settings_of(campaign) == before
    assert not Campaign.objects.filter(slug=slug).exists()


def _allocation_post(kind: str, *settings: object) -> dict[str, str]:
    """The page's allocation boxes: the policy, then minimum, maximum, disagreement range,
    standard-error threshold and metric threshold ("" for an empty box)."""
    values = [kind, *settings]
    return {
        f"allocation_{index}": "" if value is None else str(value)
        for index, value in enumerate(values)
    }


def _page_posts(curator_client, campaign, allocation: dict[str, str]):  # type: ignore[no-untyped-def]
    edit_url = f"/dashboard/campaigns/{campaign.slug}/edit/"
    edited = curator_client.get(edit_url).context["form"].initial
    edited = {name: _posted(value) for name, value in edited.items() if name != "allocation"}
    new = _new_campaign_form()
    for data in (edited, new):
        data.update(allocation)
        for name in [name for name, value in data.items() if value == ""]:
            if OPTIONS_BY_NAME.get(name, OPTIONS_BY_NAME["name"]).kind == Kind.BOOLEAN:
                del data[name]
    return (
        curator_client.post(edit_url, edited),
        curator_client.post("/dashboard/campaigns/new/", new),
        new["slug"],
    )


def test_allocation_the_pages_store_a_policy_and_show_it_back(curator_client, campaign):
    edit, create, slug = _page_posts(
        curator_client, campaign, _allocation_post("adaptive", 2, 4, 1, 0.5, None)
    )
    assert (edit.status_code, create.status_code) == (302, 302)
    assert _settings_of(campaign)["allocation"] == ADAPTIVE_STORED
    assert Campaign.objects.get(slug=slug).allocation == ADAPTIVE_STORED
    # The edit page shows the policy back, and posting it unchanged keeps it.
    page = curator_client.get(f"/dashboard/campaigns/{campaign.slug}/edit/")
    html = page.content.decode()
    assert '<option value="adaptive" selected>' in html
    assert 'name="allocation_2" value="4"' in html
    edit, _create, _slug = _page_posts(curator_client, campaign, {})
    assert edit.status_code == 302
    assert _settings_of(campaign)["allocation"] == ADAPTIVE_STORED
    # Back to fixed.
    edit, _create, _slug = _page_posts(curator_client, campaign, _allocation_post("fixed"))
    assert edit.status_code == 302
    assert _settings_of(campaign)["allocation"] == {}


def test_allocation_the_pages_refuse_a_broken_policy(curator_client, campaign):
    before = _settings_of(campaign)
    edit, create, slug = _page_posts(
        curator_client, campaign, _allocation_post("adaptive", 3, 2, 1, None, None)
    )
    expected = {
        "allocation": ["A judgment allocation policy: The maximum must not be below the minimum."]
    }
    assert (edit.status_code, edit.context["form"].errors) == (200, expected)
    assert (create.status_code, create.context["form"].errors) == (200, expected)
    assert _settings_of(campaign) == before
    assert not Campaign.objects.filter(slug=slug).exists()


def test_allocation_restarts_the_quotas_and_follows_the_review_threshold(campaign):
    from annotation.models import CampaignCandidate

    campaign_update(campaign=campaign, allocation={"kind": "adaptive", "minimum": 2, "maximum": 4})
    assert list(
        CampaignCandidate.objects.filter(campaign=campaign).values_list("quota", flat=True)
    ) == [2]
    campaign_update(campaign=campaign, judgments_per_candidate=7)  # not an adaptive quota
    assert list(
        CampaignCandidate.objects.filter(campaign=campaign).values_list("quota", flat=True)
    ) == [2]
    campaign_update(campaign=campaign, allocation={})
    assert list(
        CampaignCandidate.objects.filter(campaign=campaign).values_list("quota", flat=True)
    ) == [7]
    # A review threshold the stored policy's disagreement range would reach is refused.
    campaign_update(campaign=campaign, allocation={"kind": "adaptive", "disagreement_range": 2})
    with pytest.raises(CampaignInvalid) as refused:
        campaign_update(campaign=campaign, review_range_threshold=2)
    assert refused.value.errors == {
        "allocation": [
            "A judgment allocation policy: The disagreement range lies in 1 .. review range "
            "threshold - 1."
        ]
    }
    campaign_update(campaign=campaign, review_range_threshold=5)
    campaign.refresh_from_db()
    assert campaign.allocation["review_range_threshold"] == 5
