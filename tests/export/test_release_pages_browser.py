"""The release pages in Debian's Chromium against a live server, at 1280×800 and 390×844: the
form offers the licence of the collected judgments; the detail page downloads the whole release
as one zip (its files equal the stored ones), names the reasons candidates were left out in words
and lists each source's licence, without overflowing the screen."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from export.download import release_zip_folder
from export.models import Release
from tests.export.builders import build_campaign
from tests.export.helpers import build, read_file
from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/work/shots/importpage")
WIDTHS = {"wide": (1280, 800), "phone": (390, 844)}


@pytest.fixture
def browser() -> Iterator[object]:
    with chromium_browser() as launched:
        yield launched


def _fits(page) -> None:  # type: ignore[no-untyped-def]
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.evaluate("window.innerWidth"), f"the page is {width} px wide"


@pytest.mark.parametrize("width", list(WIDTHS))
def test_a_curator_downloads_the_whole_release_and_reads_its_licences(
    live_server, browser, curator, width
):
    SHOTS.mkdir(parents=True, exist_ok=True)
    data = build_campaign(slug="browsed", clips=8, workers=4)
    release = build(campaigns=[data.campaign], seed=1, name="browsed release")
    Release.objects.filter(pk=release.pk).update(
        counts={**release.counts, "excluded": {"below_quota": 3, "control": 2, "dropped": 0}}
    )
    viewport_width, viewport_height = WIDTHS[width]
    context = browser.new_context(  # type: ignore[attr-defined]
        viewport={"width": viewport_width, "height": viewport_height}, accept_downloads=True
    )
    page = context.new_page()
    page.goto(f"{live_server.url}/dashboard/releases/")
    page.fill("#id_username", "curator")
    page.fill("#id_password", "curator-password-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/dashboard/releases/")
    assert page.locator("#id_judgments_license").input_value() == "cc-by-4.0"
    _fits(page)
    page.screenshot(path=str(SHOTS / f"release-list-{width}.png"), full_page=True)

    page.goto(f"{live_server.url}/dashboard/releases/{release.pk}/")
    below = page.locator('tr[data-reason="below_quota"]')
    assert below.locator("th").inner_text() == "Fewer kept judgments than the campaign asks for"
    assert below.locator("td").inner_text() == "3"
    assert "below_quota" not in page.locator("main").inner_text()
    licence = page.locator('tr[data-license="cc-by-4.0"]')
    assert "judgments collected with Lepus (campaigns browsed)" in licence.inner_text()
    assert "CC BY 4.0 (attribution)" in licence.inner_text()
    _fits(page)
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
