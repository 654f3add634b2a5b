"""The data browser: the clip, candidate, judgment and worker tables (filters, sorts, keyset pages
that together list every row exactly once) and the clip, candidate and worker pages, with every
figure checked against the database."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.models import (
    AuditEntry,
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    WorkerExclusion,
)
from annotation.quality.aggregation import aggregation_recompute
from annotation.quality.exclusions import worker_exclude
from datasets_app.models import Clip
from tests.annotation.crowd_factories import crowd_campaign
from tests.factories import JudgmentFactory, ParticipationFactory, WorkerFactory

pytestmark = pytest.mark.django_db

JUDGMENTS = "/dashboard/datasets/judgments/"


def browse_world(curator: Any) -> dict[str, Any]:
    """Two campaigns; in the pilot, 9 candidates judged by 4 workers (36 judgments, values by a
    rule below, times spread over a day with ties), worker w-spam excluded by the curator."""
    campaign = crowd_campaign(clips=3, candidates_per_clip=3, judgments_per_candidate=4)
    other = crowd_campaign(clips=1, candidates_per_clip=2, slug="other")
    workers = [WorkerFactory(external_id=f"w-{name}") for name in ("ann", "bob", "cy", "spam")]
    participations = [ParticipationFactory(campaign=campaign, worker=w) for w in workers]
    ParticipationFactory(campaign=other, worker=workers[0])
    start = timezone.now() - timedelta(days=1)
    items = list(CampaignCandidate.objects.filter(campaign=campaign).order_by("pk"))
    # Four kept judgments each take one of the candidate's four slots.
    CampaignCandidate.objects.filter(campaign=campaign).update(slots_taken=4)
    for i, item in enumerate(items):
        for j, participation in enumerate(participations):
            JudgmentFactory(
                campaign_candidate=item,
                campaign=campaign,
                participation=participation,
                values={key: 1 + (i + j) % 5 for key in campaign.question_keys},
                reason="too vague" if (i + j) % 5 == 0 else "",
                # Pairs of judgments share a time: the keyset must break the tie by id.
                created_at=start + timedelta(minutes=(i * 4 + j) // 2),
                server_ms=1000 * (j + 1),
            )
    worker_exclude(participation=participations[3], actor=curator, reason="spam")
    return {"campaign": campaign, "other": other, "participations": participations, "items": items}


def ids_on(html: str, attribute: str) -> list[int]:
    return [int(value) for value in re.findall(rf'data-{attribute}="(\d+)"', html)]


def walk(client: Client, url: str, attribute: str) -> list[int]:
    """Every id over all pages, following the next links."""
    seen: list[int] = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content[:500]
        html = response.content.decode()
        seen += ids_on(html, attribute)
        found = re.search(r'<a href="([^"]+)" rel="next">', html)
        url = found.group(1).replace("&amp;", "&") if found else ""
        if url.startswith("?"):
            url = response.request["PATH_INFO"] + url
    return seen


def test_the_url_names_resolve():
    assert reverse("annotation:browse-clips") == "/dashboard/datasets/clips/"
    assert reverse("annotation:browse-clip", args=[4]) == "/dashboard/datasets/clips/4/"
    assert reverse("annotation:browse-candidates") == "/dashboard/datasets/candidates/"
    assert reverse("annotation:browse-candidate", args=[5]) == "/dashboard/datasets/candidates/5/"
    assert reverse("annotation:browse-judgments") == JUDGMENTS
    assert reverse("annotation:browse-workers") == "/dashboard/datasets/workers/"


@pytest.mark.parametrize("name", ["clips", "candidates", "judgments", "workers"])
def test_only_curators_open_the_tables(client, outsider, name):
    url = reverse(f"annotation:browse-{name}")
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    client.force_login(outsider)
    assert client.get(url).status_code == 403


@pytest.mark.parametrize("sort", ["id", "created"])
@pytest.mark.parametrize("order", ["desc", "asc"])
def test_judgment_pages_list_every_judgment_once_in_order(curator_client, curator, sort, order):
    browse_world(curator)
    seen = walk(curator_client, f"{JUDGMENTS}?size=25&sort={sort}&order={order}", "judgment")
    field = {"id": "pk", "created": "created_at"}[sort]
    prefix = "-" if order == "desc" else ""
    expected = list(
        Judgment.objects.order_by(f"{prefix}{field}", f"{prefix}pk").values_list("pk", flat=True)
    )
    assert len(expected) == 36
    assert seen == expected


def test_judgment_filters_match_the_database(curator_client, curator):
    world = browse_world(curator)
    campaign: Campaign = world["campaign"]
    key = campaign.question_keys[1]
    cases = {
        f"worker=w-bob&campaign={campaign.slug}": Judgment.objects.filter(
            participation__worker__external_id="w-bob"
        ),
        f"criterion={key}&rating=2": Judgment.objects.filter(**{f"values__{key}": 2}),
        "state=excluded": Judgment.objects.filter(is_excluded=True),
        "state=kept": Judgment.objects.filter(is_excluded=False),
        f"clip={world['items'][0].clip.vatex_id}": Judgment.objects.filter(
            campaign_candidate__clip=world["items"][0].clip
        ),
    }
    for query, expected in cases.items():
        seen = walk(curator_client, f"{JUDGMENTS}?size=25&{query}", "judgment")
        assert sorted(seen) == sorted(expected.values_list("pk", flat=True)), query
        assert seen, query
    assert len(walk(curator_client, f"{JUDGMENTS}?state=excluded", "judgment")) == 9


@pytest.mark.parametrize(
    "query",
    [
        "size=1000",
        "rating=3",
        "sort=reason",
        "after=not-a-cursor",
        "after=WzEsMl0",
        "campaign=nope",
        "criterion=colour",
        "criterion=relevance&rating=9",
    ],
)
def test_bad_queries_answer_400_with_the_form(curator_client, curator, query):
    browse_world(curator)
    response = curator_client.get(f"{JUDGMENTS}?{query}")
    if query == "after=WzEsMl0":
        # [1, 2] is a well-formed cursor (value 1, id 2): a page, empty or not, never an error.
        assert response.status_code == 200
        return
    assert response.status_code == 400
    assert 'class="error"' in response.content.decode()


def test_candidate_table_sorts_by_overall_and_filters(curator_client, curator):
    world = browse_world(curator)
    aggregation_recompute(campaign=world["campaign"])
    url = reverse("annotation:browse-candidates")
    seen = walk(curator_client, f"{url}?size=25&sort=overall&campaign=pilot", "candidate")
    expected = sorted(
        CampaignCandidate.objects.filter(campaign=world["campaign"]),
        key=lambda item: (item.overall if item.overall is not None else -1, item.pk),
        reverse=True,
    )
    assert seen == [item.pk for item in expected]
    assert all(item.overall is not None for item in expected)
    assert walk(curator_client, f"{url}?campaign=other", "candidate") == sorted(
        CampaignCandidate.objects.filter(campaign=world["other"]).values_list("pk", flat=True),
        reverse=True,
    )


def test_clip_and_worker_tables(curator_client, curator):
    world = browse_world(curator)
    clips = walk(curator_client, reverse("annotation:browse-clips") + "?size=25", "clip")
    assert clips == list(Clip.objects.order_by("vatex_id").values_list("pk", flat=True))
    html = curator_client.get(reverse("annotation:browse-clips")).content.decode()
    first = Clip.objects.order_by("vatex_id").first()
    assert first is not None
    row = html.split(f'data-clip="{first.pk}"')[1].split("</tr>")[0]
    assert f'data-field="candidates">{first.candidates.count()}<' in row
    assert f'data-field="references">{first.references.count()}<' in row

    workers_url = reverse("annotation:browse-workers")
    seen = walk(curator_client, f"{workers_url}?status=excluded", "participation")
    assert seen == [world["participations"][3].pk]
    html = curator_client.get(f"{workers_url}?campaign=pilot&worker=w-b").content.decode()
    bob = world["participations"][1]
    assert ids_on(html, "participation") == [bob.pk]
    assert 'data-field="judgments"><a' in html and f">{bob.judgments.count()}</a>" in html


def test_candidate_page_shows_every_judgment_its_aggregate_and_history(curator_client, curator):
    world = browse_world(curator)
    item: CampaignCandidate = world["items"][2]
    item.refresh_from_db()
    response = curator_client.get(reverse("annotation:browse-candidate", args=[item.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    judgments = list(item.judgments.order_by("created_at", "pk"))
    assert ids_on(html, "judgment") == [judgment.pk for judgment in judgments]
    for judgment in judgments:
        row = html.split(f'id="judgment-{judgment.pk}"')[1].split("</tr>")[0]
        values = re.findall(r"<td data-value>(\d+)</td>", row)
        assert values == [str(judgment.values[key]) for key in item.campaign.question_keys]
        assert ("Excluded" in row) == judgment.is_excluded
    # Counted from the judgments themselves, as the table lists them (not QC's stored counters).
    assert f'data-field="judgments_total">{len(judgments)}<' in html
    kept = sum(1 for judgment in judgments if not judgment.is_excluded)
    assert f'data-field="kept_judgments">{kept}<' in html
    exclusion = WorkerExclusion.objects.get()
    assert f'data-exclusion="{exclusion.pk}"' in html
    for entry in AuditEntry.objects.filter(target=f"worker:{exclusion.participation_id}"):
        # Worker-level audit entries are on the worker's page, not repeated per candidate.
        assert f'data-audit="{entry.pk}"' not in html
    assert (
        curator_client.get(reverse("annotation:browse-candidate", args=[999999])).status_code == 404
    )


def test_clip_page_shows_video_references_and_candidates(curator_client, curator):
    world = browse_world(curator)
    clip = world["items"][0].clip
    response = curator_client.get(reverse("annotation:browse-clip", args=[clip.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert "<video" in html and clip.video_key in html
    for reference in clip.references.all():
        assert reference.text in html
    for candidate in clip.candidates.all():
        assert f'data-caption="{candidate.pk}"' in html
    for item in CampaignCandidate.objects.filter(clip=clip):
        assert f'data-item="{item.pk}"' in html
    assert curator_client.get(reverse("annotation:browse-clip", args=[999999])).status_code == 404


def test_worker_page_lists_judgments_and_exclusions(curator_client, curator):
    world = browse_world(curator)
    spam: Participation = world["participations"][3]
    url = reverse("annotation:quality-worker", args=[world["campaign"].slug, spam.pk])
    html = curator_client.get(url).content.decode()
    assert ids_on(html, "judgment") == list(
        spam.judgments.order_by("-pk").values_list("pk", flat=True)
    )
    assert f'data-exclusion="{WorkerExclusion.objects.get(participation=spam).pk}"' in html
    ann = world["participations"][0]
    html = curator_client.get(
        reverse("annotation:quality-worker", args=[world["campaign"].slug, ann.pk])
    ).content.decode()
    assert "Other campaigns of this worker" in html and "Campaign other" in html
    assert "Never excluded." in html
