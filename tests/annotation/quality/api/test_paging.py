"""The limit/offset window the quality API's lists share (`annotation.quality.api.base`)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from annotation.quality.api.base import page_window


def _window(query: dict[str, str]) -> slice:
    return page_window(Request(APIRequestFactory().get("/api/v1/campaigns/x/aggregates", query)))


def test_the_window_defaults_to_the_first_hundred_rows():
    assert _window({}) == slice(0, 100)


def test_the_window_is_bounded_and_ignores_what_is_not_a_number():
    assert _window({"limit": "5000", "offset": "-3"}) == slice(0, 1000)
    assert _window({"limit": "many", "offset": "20"}) == slice(20, 120)
    assert _window({"limit": "7", "offset": str(10**12)}) == slice(10**9, 10**9 + 7)
