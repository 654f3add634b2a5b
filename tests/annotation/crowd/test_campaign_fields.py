"""One campaign field list: the admin's form, the API's representation and input, the dashboard's
form and the service's settings all derive from `CAMPAIGN_FIELDS`."""

from __future__ import annotations

from annotation.admin import CampaignAdminForm
from annotation.crowd.api.campaigns import (
    CampaignCreateSerializer,
    CampaignOptionsSerializer,
    CampaignSerializer,
)
from annotation.crowd.campaign_options import ARGUMENT_FIELDS, CAMPAIGN_FIELDS, OPTION_FIELDS
from annotation.crowd.views.campaigns import CampaignSettingsForm
from annotation.models import Campaign


def test_every_listed_field_is_a_campaign_field_and_the_options_are_the_rest():
    model_fields = {field.name for field in Campaign._meta.get_fields()}
    assert set(CAMPAIGN_FIELDS) <= model_fields
    assert len(set(CAMPAIGN_FIELDS)) == len(CAMPAIGN_FIELDS)
    assert set(OPTION_FIELDS) | set(ARGUMENT_FIELDS) == set(CAMPAIGN_FIELDS)
    assert not set(OPTION_FIELDS) & set(ARGUMENT_FIELDS)


def test_the_admin_and_the_api_show_exactly_the_listed_fields():
    assert list(CampaignAdminForm.base_fields) == list(CAMPAIGN_FIELDS)
    shown = list(CampaignSerializer().fields)
    assert shown[: len(CAMPAIGN_FIELDS)] == list(CAMPAIGN_FIELDS)
    assert not set(shown[len(CAMPAIGN_FIELDS) :]) & set(CAMPAIGN_FIELDS)


def test_the_api_accepts_every_listed_field_and_no_other():
    # Updates take every field but the slug (it never changes); creation takes the slug too, and
    # the candidate selection, which is no campaign field.
    assert set(CampaignOptionsSerializer().fields) == set(CAMPAIGN_FIELDS) - {"slug"}
    selection = {"import_batch_ids", "systems", "clips", "clip_limit"}
    assert set(CampaignCreateSerializer().fields) == set(CAMPAIGN_FIELDS) | selection


def test_the_dashboard_form_offers_a_subset_of_the_settings():
    form_fields = set(CampaignSettingsForm.base_fields)
    offered = [name for name in OPTION_FIELDS if name in form_fields]
    assert {"description", "status", "lease_seconds", "redirect_url"} <= set(offered)
    assert form_fields - set(CAMPAIGN_FIELDS) == {"question_preset", "questions_json"}
