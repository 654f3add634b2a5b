"""The release API and dashboard pages: curators only, listing only published releases,
creating, comparing, re-running and cancelling; every view in the OpenAPI schema."""

from __future__ import annotations

import json

import pytest
import requests
from django.urls import reverse

from common.models import JobStatus
from export.models import Release
from tests.export.builders import build_campaign
from tests.export.helpers import build, read_file


@pytest.fixture
def published(db):  # type: ignore[no-untyped-def]
    data = build_campaign(slug="api", clips=12, workers=6)
    first = build(campaigns=[data.campaign], seed=1)
    second = build(campaigns=[data.campaign], seed=2)
    failed = Release.objects.create(
        name="broken", ratios=[0.8, 0.2], status=JobStatus.FAILED, error="ValueError: boom"
    )
    failed.campaigns.set([data.campaign])
    return data, first, second, failed


@pytest.mark.parametrize("user", [None, "outsider"])
def test_only_curators_reach_the_release_api_and_pages(published, client, outsider, user):
    _, first, second, _ = published
    if user:
        client.force_login(outsider)
    for url in (
        "/api/v1/releases/",
        f"/api/v1/releases/{first.pk}/",
        f"/api/v1/releases/{second.pk}/compare/{first.pk}/",
    ):
        assert client.get(url).status_code == 403
    assert (
        client.post(
            "/api/v1/releases/", {"campaigns": ["api"]}, content_type="application/json"
        ).status_code
        == 403
    )
    assert client.post(f"/api/v1/releases/{first.pk}/rerun/").status_code == 403
    for url in (reverse("export:list"), reverse("export:detail", args=[first.pk])):
        response = client.get(url)
        assert response.status_code == (403 if user else 302)
    assert client.post(reverse("export:create"), {"campaigns": ["api"]}).status_code in (302, 403)
    assert Release.objects.count() == 3


def test_the_api_lists_published_releases_with_signed_downloads(published, curator_client):
    _, first, second, failed = published
    listed = curator_client.get("/api/v1/releases/").json()
    assert [entry["id"] for entry in listed] == [second.pk, first.pk]
    assert listed[0]["campaigns"] == ["api"]
    everything = curator_client.get("/api/v1/releases/?status=all").json()
    assert {entry["id"] for entry in everything} == {first.pk, second.pk, failed.pk}
    assert curator_client.get("/api/v1/releases/?status=bogus").status_code == 400

    detail = curator_client.get(f"/api/v1/releases/{first.pk}/").json()
    assert detail["status"] == "succeeded"
    assert {entry["path"]: entry["sha256"] for entry in detail["files"]} == first.files
    manifest_url = next(
        entry["url"] for entry in detail["files"] if entry["path"] == "manifest.json"
    )
    download = curator_client.get(manifest_url)
    assert download.status_code == 200
    assert b"".join(download.streaming_content).startswith(b"{\n")
    assert detail["stats"]["candidates"] == first.counts["released"]

    broken = curator_client.get(f"/api/v1/releases/{failed.pk}/").json()
    assert (broken["status"], broken["files"], broken["error"]) == (
        "failed",
        [],
        "ValueError: boom",
    )

    comparison = curator_client.get(f"/api/v1/releases/{second.pk}/compare/{first.pk}/").json()
    assert comparison["summary"]["added"] == 0
    assert comparison["summary"]["in_both"] == first.counts["released"]
    assert comparison["summary"]["moved_between_splits"] > 0
    assert (
        curator_client.get(f"/api/v1/releases/{second.pk}/compare/{failed.pk}/").status_code == 404
    )
    # Without examples the lists are empty, not missing (the schema requires them; found by
    # tests/hardening/test_schema_fuzz.py).
    for examples in ("0", "-5"):
        bare = curator_client.get(
            f"/api/v1/releases/{second.pk}/compare/{first.pk}/", {"examples": examples}
        ).json()
        assert (bare["added"], bare["removed"], bare["largest_changes"]) == ([], [], [])
        assert bare["summary"] == comparison["summary"]


def test_the_api_creates_reruns_and_cancels_releases(
    published, curator_client, curator, django_capture_on_commit_callbacks
):
    _, first, _, failed = published
    with django_capture_on_commit_callbacks() as callbacks:
        response = curator_client.post(
            "/api/v1/releases/",
            {"campaigns": ["api"], "seed": 5, "ratios": [0.8, 0.1, 0.1], "name": "api v3"},
            content_type="application/json",
        )
    assert response.status_code == 202
    created = Release.objects.get(pk=response.json()["id"])
    assert (created.status, created.seed, created.ratios, created.name) == (
        "queued",
        5,
        [0.8, 0.1, 0.1],
        "api v3",
    )
    assert created.created_by == curator
    assert len(callbacks) == 1  # the build is published to the broker after commit

    bad = curator_client.post(
        "/api/v1/releases/",
        {"campaigns": ["api"], "ratios": [0.5, 0.2]},
        content_type="application/json",
    )
    assert bad.status_code == 400
    unknown = curator_client.post(
        "/api/v1/releases/", {"campaigns": ["nope"]}, content_type="application/json"
    )
    assert unknown.status_code == 400
    assert Release.objects.count() == 4

    assert curator_client.post(f"/api/v1/releases/{created.pk}/cancel/").json() == {
        "id": created.pk,
        "status": "cancelled",
    }
    assert curator_client.post(f"/api/v1/releases/{first.pk}/cancel/").status_code == 409
    assert curator_client.post(f"/api/v1/releases/{first.pk}/rerun/").status_code == 409
    with django_capture_on_commit_callbacks():
        assert curator_client.post(f"/api/v1/releases/{failed.pk}/rerun/").json() == {
            "id": failed.pk,
            "status": "queued",
        }
    failed.refresh_from_db()
    assert (failed.status, failed.error) == ("queued", "")


def test_dashboard_pages_list_show_and_compare_releases(published, curator_client):
    _, first, second, failed = published
    page = curator_client.get(reverse("export:list")).content.decode()
    assert second.name in page and first.name in page
    assert "ValueError: boom" in page  # the failed build is shown among builds, not published
    detail = curator_client.get(reverse("export:detail", args=[first.pk])).content.decode()
    for relative in first.files:
        assert relative in detail
    assert "/media/s/releases/" in detail
    assert str(first.stats["candidates"]) in detail
    compare = curator_client.get(reverse("export:compare", args=[second.pk, first.pk]))
    assert compare.status_code == 200
    assert f'data-field="in_both">{first.counts["released"]}<' in compare.content.decode()
    redirect = curator_client.get(reverse("export:detail", args=[second.pk]) + f"?other={first.pk}")
    assert redirect.status_code == 302
    assert redirect["Location"] == reverse("export:compare", args=[second.pk, first.pk])
    failed_page = curator_client.get(reverse("export:detail", args=[failed.pk])).content.decode()
    assert "Re-run" in failed_page and "/media/s/" not in failed_page
    assert f"<code>releases/{first.pk}</code>" in detail
    assert str(first.location) not in detail  # the server's folder stays on the server


def test_the_dashboard_form_creates_a_release(
    published, curator_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        response = curator_client.post(
            reverse("export:create"),
            {"campaigns": ["api"], "seed": "9", "ratios": "0.8,0.1,0.1", "name": ""},
        )
    created = Release.objects.order_by("-pk").first()
    assert response.status_code == 302
    assert response["Location"] == reverse("export:detail", args=[created.pk])
    assert (created.seed, created.ratios, created.name) == (
        9,
        [0.8, 0.1, 0.1],
        "vid-lepus-api-seed9",
    )
    invalid = curator_client.post(
        reverse("export:create"), {"campaigns": ["api"], "seed": "1", "ratios": "0.9,0.9"}
    )
    assert invalid.status_code == 400
    assert "ratios must sum to 1" in invalid.content.decode()
    assert Release.objects.count() == 4


def test_every_release_view_is_in_the_openapi_schema(curator_client):
    schema = curator_client.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert set(paths["/api/v1/releases/"]) >= {"get", "post"}
    for path in (
        "/api/v1/releases/{release_id}/",
        "/api/v1/releases/{release_id}/compare/{other_id}/",
    ):
        assert "get" in paths[path]
    for path in ("/api/v1/releases/{release_id}/rerun/", "/api/v1/releases/{release_id}/cancel/"):
        assert "post" in paths[path]


def test_no_release_api_answer_shows_a_server_path(
    published, curator_client, settings, django_capture_on_commit_callbacks
):
    """`location` is the key relative to the storage root (docs/releases.md), never the folder."""
    _, first, second, failed = published
    assert first.location == str(settings.MEDIA_ROOT / "releases" / str(first.pk))  # server-side
    with django_capture_on_commit_callbacks():
        created = curator_client.post(
            "/api/v1/releases/", {"campaigns": ["api"]}, content_type="application/json"
        )
        rerun = curator_client.post(f"/api/v1/releases/{failed.pk}/rerun/")
    answers = [
        created,
        rerun,
        curator_client.get("/api/v1/releases/"),
        curator_client.get("/api/v1/releases/?status=all"),
        curator_client.get(f"/api/v1/releases/{first.pk}/"),
        curator_client.get(f"/api/v1/releases/{failed.pk}/"),
        curator_client.get(f"/api/v1/releases/{second.pk}/compare/{first.pk}/"),
        curator_client.post(f"/api/v1/releases/{created.json()['id']}/cancel/"),
    ]
    for answer in answers:
        assert answer.status_code in (200, 202), answer.content
        text = answer.content.decode()
        for server_path in (
            str(settings.MEDIA_ROOT),
            str(settings.BASE_DIR),
            str(settings.VAR_DIR),
        ):
            assert server_path not in text
    assert created.json()["location"] == f"releases/{created.json()['id']}"
    listed = {entry["id"]: entry["location"] for entry in answers[3].json()}
    assert listed == {
        first.pk: f"releases/{first.pk}",
        second.pk: f"releases/{second.pk}",
        created.json()["id"]: f"releases/{created.json()['id']}",
        failed.pk: "",  # made by the fixture without a storage prefix
    }
    assert answers[4].json()["location"] == f"releases/{first.pk}"


def test_the_release_api_shows_the_storage_key_on_s3_too(s3_storage, client, curator):
    data = build_campaign(slug="apis3", clips=6, workers=4)
    release = build(campaigns=[data.campaign], seed=1)
    assert release.location == f"s3://{s3_storage}/releases/{release.pk}"  # server-side
    client.force_login(curator)
    detail = client.get(f"/api/v1/releases/{release.pk}/").json()
    assert detail["location"] == f"releases/{release.pk}"
    assert [entry["location"] for entry in client.get("/api/v1/releases/").json()] == [
        f"releases/{release.pk}"
    ]
    assert "s3://" not in json.dumps(detail)
    # The files still download, through their signed URLs.
    manifest_url = next(
        entry["url"] for entry in detail["files"] if entry["path"] == "manifest.json"
    )
    assert requests.get(manifest_url, timeout=30).content == read_file(release, "manifest.json")
