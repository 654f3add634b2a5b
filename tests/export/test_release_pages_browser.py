"""The release pages in Debian's Chromium against a live server, at 1280×800 and 390×844: the
form offers the licence of the collected judgments; the detail page downloads the whole release
as one zip (its files equal the stored ones), names the reasons candidates were left out in words
and lists each source's licence, without overflowing the screen."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from export.download import release_zip_folder
from export.models import Release
from tests.export.builders import build_campaign
from tests.export.helpers import build, read_file
from tests.support.browser import (
    VIEWPORTS,
    assert_fits_viewport,
    log_in,
    page_at,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/work/shots/importpage")


@pytest.mark.parametrize("width", list(VIEWPORTS))
def test_a_curator_downloads_the_whole_release_and_reads_its_licences(
    live_server, chromium, curator, width
):
    SHOTS.mkdir(parents=True, exist_ok=True)
    data = build_campaign(slug="browsed", clips=8, workers=4)
    release = build(campaigns=[data.campaign], seed=1, name="browsed release")
    Release.objects.filter(pk=release.pk).update(
        counts={**release.counts, "excluded": {"below_quota": 3, "control": 2, "dropped": 0}}
    )
    page = page_at(chromium, width, accept_downloads=True)
    log_in(
        page,
        f"{live_server.url}/dashboard/releases/",
        username="curator",
        password="curator-password-1",
    )
    assert page.locator("#id_judgments_license").input_value() == "cc-by-4.0"
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"release-list-{width}.png"), full_page=True)

    page.goto(f"{live_server.url}/dashboard/releases/{release.pk}/")
    below = page.locator('tr[data-reason="below_quota"]')
    assert below.locator("th").inner_text() == "Fewer kept judgments than the campaign asks for"
    assert below.locator("td").inner_text() == "3"
    assert "below_quota" not in page.locator("main").inner_text()
    licence = page.locator('tr[data-license="cc-by-4.0"]')
    assert "judgments collected with Lepus (campaigns browsed)" in licence.inner_text()
    assert "CC BY 4.0 (attribution)" in licence.inner_text()
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"release-detail-{width}.png"), full_page=True)

    with page.expect_download() as waiting:
        page.locator("#download-all").click()
    download = waiting.value
    folder = release_zip_folder(release=release)
    assert download.suggested_filename == f"{folder}.zip"
    archive = zipfile.ZipFile(io.BytesIO(Path(download.path()).read_bytes()))
    assert sorted(archive.namelist()) == sorted(f"{folder}/{name}" for name in release.files)
    for relative in release.files:
        assert archive.read(f"{folder}/{relative}") == read_file(release, relative)
