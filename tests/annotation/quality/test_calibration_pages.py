"""Severity with its uncertainty on the curator's workers table and worker page."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from annotation.quality.calibration_job import calibration_campaign, worker_severities
from tests.annotation.quality.test_calibration_job import harsh_campaign

pytestmark = pytest.mark.django_db


def test_the_workers_table_shows_severity_with_its_standard_error_and_sorts_by_it(
    curator_client,
):
    campaign, _fair, harsh, _items = harsh_campaign(slug="table")
    calibration_campaign(campaign=campaign)
    url = reverse("annotation:quality-workers", kwargs={"slug": "table"})
    page = curator_client.get(url, {"sort": "severity", "order": "desc"}).content.decode()
    assert "Severity ± SE" in page
    rows = re.findall(r'data-worker="([^"]+)"', page)
    assert rows[0] == "harsh"  # the harshest first
    cell = re.search(
        r'data-worker="harsh".*?<td class="severity" title="([^"]+)">([^<]+)<', page, re.S
    )
    assert cell is not None
    entries = worker_severities(campaign=campaign)[harsh.pk]
    mean = sum(entry["severity"] for entry in entries.values()) / 3
    assert cell.group(2).startswith(f"{mean:.2f} ± ")
    assert "fluency: " in cell.group(1)
    api = reverse("annotation_api:quality-workers", kwargs={"slug": "table"})
    row = next(row for row in curator_client.get(api).json()["workers"] if row["worker"] == "harsh")
    assert row["severity"]["low"] > 0 and set(row["severities"]) == {
        "descriptiveness",
        "relevance",
        "fluency",
    }


def test_the_worker_page_shows_each_question_with_its_interval(curator_client):
    campaign, fair, harsh, _items = harsh_campaign(slug="page")
    url = reverse(
        "annotation:quality-worker", kwargs={"slug": "page", "participation_id": harsh.pk}
    )
    before = curator_client.get(url).content.decode()
    assert "the campaign has not been calibrated" in before
    calibration_campaign(campaign=campaign)
    page = curator_client.get(url).content.decode()
    entry = worker_severities(campaign=campaign)[harsh.pk]["relevance"]
    row = re.search(r'data-question="relevance">(.*?)</tr>', page, re.S)
    assert row is not None
    assert f"{entry['severity']:.2f} ± {entry['standard_error']:.2f}" in row.group(1)
    assert f"[{entry['low']:.2f}, {entry['high']:.2f}]" in row.group(1)
    assert "<td>12</td>" in row.group(1)  # judgments
    other = reverse(
        "annotation:quality-worker", kwargs={"slug": "page", "participation_id": fair[0].pk + 999}
    )
    assert curator_client.get(other).status_code == 404
