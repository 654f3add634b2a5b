"""The quality pages (annotation/quality/views.py): curators only, CSRF-protected changes, sortable
tables, SVG charts. The campaign `qdash` comes from the `quality_campaign` fixture (conftest)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from annotation.models import (
    AuditEntry,
    Judgment,
    ParticipationStatus,
    QCRun,
    ReviewItem,
    ReviewStatus,
)

pytestmark = pytest.mark.django_db

PAGES = [
    "/dashboard/campaigns/qdash/",
    "/dashboard/campaigns/qdash/workers/",
    "/dashboard/campaigns/qdash/review/",
    "/dashboard/campaigns/qdash/leaderboard/",
    "/dashboard/campaigns/qdash/audit/",
]


@pytest.mark.parametrize("path", PAGES)
def test_pages_are_for_curators_only(path, quality_campaign, client, outsider, curator):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")
    client.force_login(outsider)
    assert client.get(path).status_code == 403
    client.force_login(curator)
    page = client.get(path)
    assert page.status_code == 200
    html = page.content.decode()
    assert "cdn" not in html.lower() and '<script src="http' not in html


def test_review_item_page_and_posts_are_curator_only(quality_campaign, client, outsider):
    item = ReviewItem.objects.filter(campaign=quality_campaign).first()
    url = f"/dashboard/campaigns/qdash/review/{item.pk}/"
    assert client.get(url).status_code == 302
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    assert client.post(url + "resolve/", {"rating_relevance": "5"}).status_code == 403
    assert client.post(url + "claim/").status_code == 403
    item.refresh_from_db()
    assert item.status == ReviewStatus.OPEN and not AuditEntry.objects.exists()


def test_the_campaign_page_draws_charts_as_svg(quality_campaign, curator_client):
    html = curator_client.get("/dashboard/campaigns/qdash/").content.decode()
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img"') == 7
    assert "Judgments per day, last 30 days" in html
    assert "Krippendorff&#x27;s alpha of Relevance over time" in html
    assert "Ratings of Fluency (1 to 5)" in html
    assert (
        '<strong data-figure="candidates_complete">6</strong> of <span data-figure="candidates_in_play">6</span> candidates complete'
        in html
    )


def test_the_worker_table_sorts_and_explains(quality_campaign, curator_client):
    html = curator_client.get(
        "/dashboard/campaigns/qdash/workers/?sort=median_seconds&order=desc"
    ).content.decode()
    order = re.findall(r'data-worker="(dash-\d)"', html)
    assert order == ["dash-2", "dash-1", "dash-0"]
    assert 'aria-sort="descending"' in html
    assert "Below 1.0 the worker cannot have watched the whole clip." in html
    ascending = curator_client.get("/dashboard/campaigns/qdash/workers/?sort=median_seconds")
    assert re.findall(r'data-worker="(dash-\d)"', ascending.content.decode()) == [
        "dash-0",
        "dash-1",
        "dash-2",
    ]


def test_exclude_and_include_buttons_need_csrf_and_work_with_it(quality_campaign, curator):
    participation = quality_campaign.participations.get(worker__external_id="dash-1")
    url = f"/dashboard/campaigns/qdash/workers/{participation.pk}/exclude/"
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(curator)

    assert strict.post(url, {"reason": "no token"}).status_code == 403
    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.ACTIVE

    page = strict.get("/dashboard/campaigns/qdash/workers/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    response = strict.post(url, {"reason": "spot check", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.EXCLUDED
    assert Judgment.objects.filter(participation=participation, is_excluded=True).count() == 6

    include = f"/dashboard/campaigns/qdash/workers/{participation.pk}/include/"
    assert strict.post(include, {"csrfmiddlewaretoken": token}).status_code == 302
    participation.refresh_from_db()
    assert participation.status == ParticipationStatus.ACTIVE
    assert not Judgment.objects.filter(participation=participation, is_excluded=True).exists()


def test_run_qc_button_queues_a_run(quality_campaign, curator_client):
    response = curator_client.post("/dashboard/campaigns/qdash/qc-runs/")
    assert response.status_code == 302
    run = QCRun.objects.get(campaign=quality_campaign)
    assert run.status == "queued" and run.requested_by.username == "curator"
    # A second click does not queue a second run while one is waiting.
    curator_client.post("/dashboard/campaigns/qdash/qc-runs/")
    assert QCRun.objects.filter(campaign=quality_campaign).count() == 1
