"""The worker API's content negotiation (common.api.RememberedContentNegotiation): DRF's answers,
remembered per `Accept` header; refusals, format overrides and query strings still go to DRF."""

from __future__ import annotations

import pytest
from django.http import Http404
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory

from annotation.crowd.api.worker import AssignmentNextApi, AssignmentSubmitApi, WorkerMeApi
from common.api import RememberedContentNegotiation
from tests.annotation.crowd_factories import crowd_campaign, crowd_join

ACCEPTS = [
    None,
    "*/*",
    "application/json",
    "application/json; indent=4",
    "application/*",
    "text/html, application/json;q=0.9, */*;q=0.8",
    "application/json, text/plain, */*",
    "*/*; charset=utf-8",
]
RENDERER_SETS = [[JSONRenderer], [JSONRenderer, BrowsableAPIRenderer], [BrowsableAPIRenderer]]


def _request(accept: str | None, query: str = "") -> Request:
    factory = APIRequestFactory()
    if accept is None:
        return Request(factory.get(f"/x{query}"))
    return Request(factory.get(f"/x{query}", HTTP_ACCEPT=accept))


def _answer(negotiator, accept, classes, query=""):  # type: ignore[no-untyped-def]
    renderers = [renderer() for renderer in classes]
    try:
        renderer, media_type = negotiator.select_renderer(_request(accept, query), renderers)
    except NotAcceptable:
        return "406"
    assert renderer in renderers  # an instance of this request's renderers, not a remembered one
    return type(renderer), media_type


@pytest.fixture(autouse=True)
def _forget(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(RememberedContentNegotiation, "_remembered", {})


@pytest.mark.parametrize("classes", RENDERER_SETS)
@pytest.mark.parametrize("accept", [*ACCEPTS, "text/html", "text/csv", ""])
def test_the_answers_are_drfs_the_first_time_and_when_remembered(accept, classes):
    expected = _answer(DefaultContentNegotiation(), accept, classes)
    remembered = RememberedContentNegotiation()
    assert _answer(remembered, accept, classes) == expected
    assert _answer(remembered, accept, classes) == expected
    assert _answer(RememberedContentNegotiation(), accept, classes) == expected


def test_refusals_format_overrides_and_long_headers_are_not_remembered():
    negotiator = RememberedContentNegotiation()
    assert _answer(negotiator, "text/csv", [JSONRenderer]) == "406"
    with pytest.raises(Http404):  # ?format= is DRF's: no JSON renderer has the format "api"
        _answer(negotiator, "*/*", [JSONRenderer], query="?format=api")
    assert _answer(negotiator, "*/*", [JSONRenderer], query="?format=json") == (
        JSONRenderer,
        "application/json",
    )
    long_header = "application/json, " + "x" * RememberedContentNegotiation.max_remembered_chars
    assert _answer(negotiator, long_header, [JSONRenderer]) == (JSONRenderer, "application/json")
    assert RememberedContentNegotiation._remembered == {}


def test_at_most_max_remembered_headers_are_kept(monkeypatch):
    monkeypatch.setattr(RememberedContentNegotiation, "max_remembered", 3)
    negotiator = RememberedContentNegotiation()
    for index in range(10):
        accept = f"application/json; v={index}"
        assert _answer(negotiator, accept, [JSONRenderer]) == (JSONRenderer, accept)
    assert len(RememberedContentNegotiation._remembered) == 3


def test_the_worker_api_uses_it():
    for view in (AssignmentNextApi, AssignmentSubmitApi, WorkerMeApi):
        assert view.content_negotiation_class is RememberedContentNegotiation


@pytest.mark.django_db
def test_next_still_refuses_an_unacceptable_type_every_time_and_answers_json_otherwise():
    campaign = crowd_campaign(clips=2, candidates_per_clip=2, judgments_per_candidate=2)
    token, _participation = crowd_join(campaign, "worker-a")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Worker {token}")
    for _attempt in range(2):
        response = client.post("/api/v1/worker/assignments/next", HTTP_ACCEPT="text/csv")
        assert response.status_code == 406
    for accept in ("application/json", "*/*", "application/json"):
        response = client.post("/api/v1/worker/assignments/next", HTTP_ACCEPT=accept)
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
