"""The import page in Debian's Chromium against a live server and a real Celery worker, at
1280×800 and 390×844: a curator uploads a judgments file that is refused (the job's page shows the
file, line and field next to the form to upload a corrected file, and no row was written), then
uploads a candidates file through that form and sees what was written, the same figures as the
API and the database."""

from __future__ import annotations

from pathlib import Path

import pytest

from annotation.models import ImportUpload
from common.models import JobStatus
from datasets_app.models import CandidateCaption, Clip
from tests.annotation.imports.upload_support import row_counts, write_bad_judgments
from tests.datasets_app.helpers import EXAMPLES, run_command
from tests.support.browser import (
    VIEWPORTS,
    assert_fits_viewport,
    log_in,
    page_at,
)

pytestmark = [pytest.mark.browser, pytest.mark.celery_worker]

SHOTS = Path("/work/shots/importpage")


def _wait_finished(page, job_id: int) -> None:  # type: ignore[no-untyped-def]
    # The page polls the job's status and reloads once it has finished.
    page.wait_for_selector('[data-finished="true"]', timeout=120_000)
    assert ImportUpload.objects.get(pk=job_id).is_finished


@pytest.mark.parametrize("width", list(VIEWPORTS))
def test_a_refused_upload_shows_file_line_and_field_beside_the_form_and_writes_nothing(
    live_server, chromium, celery_worker_process, curator, tmp_path, width
):
    SHOTS.mkdir(parents=True, exist_ok=True)
    run_command("import_vatex", str(EXAMPLES / "vatex.json"))
    bad = write_bad_judgments(tmp_path)
    before = row_counts()
    page = page_at(chromium, width)
    log_in(
        page,
        f"{live_server.url}/dashboard/datasets/",
        username="curator",
        password="curator-password-1",
    )
    # The Data page leads to the import page.
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"data-page-{width}.png"), full_page=True)
    page.get_by_role("link", name="Import files").click()
    page.wait_for_url(f"{live_server.url}/dashboard/datasets/imports/")
    assert page.locator("h1").inner_text() == "Import"
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"import-page-{width}.png"), full_page=True)

    page.select_option("#id_kind", "judgments")
    page.fill("#id_campaign", "crowd-from-page")
    page.set_input_files("#id_file", str(bad))
    page.get_by_role("button", name="Upload and import").click()
    page.wait_for_url(f"{live_server.url}/dashboard/datasets/imports/*/")
    job = ImportUpload.objects.get()
    _wait_finished(page, job.pk)

    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.task_id != ""  # run by the Celery worker, not in this process
    panel = page.locator('[data-field="rejection"]')
    assert panel.locator('[data-rejection="file"]').inner_text() == "judgments-bad.csv"
    assert panel.locator('[data-rejection="line"]').inner_text().startswith("4")
    assert panel.locator('[data-rejection="field"]').inner_text() == "overall"
    assert panel.locator('[data-rejection="describe"]').inner_text() == job.error
    assert job.error.startswith('judgments-bad.csv, line 4, field "overall": ')
    assert "nothing was written" in panel.inner_text()
    assert row_counts() == before

    # The form to upload a corrected file sits beside the refusal (below it on a phone).
    refusal_box = page.locator("#import-job").bounding_box()
    form_box = page.locator("#import-form").bounding_box()
    assert refusal_box and form_box
    if width == "wide":
        assert form_box["x"] > refusal_box["x"] + refusal_box["width"] - 1
        assert abs(form_box["y"] - refusal_box["y"]) < 120
    else:
        assert form_box["y"] > refusal_box["y"] + refusal_box["height"] - 1
    assert page.locator("#id_kind").input_value() == "judgments"
    assert page.locator("#id_campaign").input_value() == "crowd-from-page"
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"import-refused-{width}.png"), full_page=True)

    # A good file through the same form: imported, and the page's figures are the database's.
    page.select_option("#id_kind", "candidates")
    page.fill("#id_campaign", "")
    page.set_input_files("#id_file", str(EXAMPLES / "candidates.jsonl"))
    page.get_by_role("button", name="Upload and import").click()
    page.wait_for_function(f"!location.pathname.endsWith('/imports/{job.pk}/')")
    second = ImportUpload.objects.exclude(pk=job.pk).get()
    _wait_finished(page, second.pk)
    second.refresh_from_db()
    assert second.status == JobStatus.SUCCEEDED, second.error
    assert page.locator('[data-field="status"]').first.inner_text() == "Succeeded"
    assert page.locator('[data-created="clips"]').inner_text() == str(
        second.result["created"]["clips"]
    )
    assert page.locator('[data-created="candidates"]').inner_text() == str(
        CandidateCaption.objects.count()
    )
    assert second.result["created"]["clips"] == Clip.objects.count() - before["Clip"]
    api = page.evaluate(f"fetch('/api/v1/imports/{second.pk}/').then(response => response.json())")
    assert (api["status"], api["result"]["created"]) == ("succeeded", second.result["created"])
    assert page.locator("progress").first.get_attribute("value") == "100"
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"import-succeeded-{width}.png"), full_page=True)
