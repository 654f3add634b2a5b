"""The training pages in Debian's Chromium against a live server, at 1280×800 and 390×844, on a
CPU-only machine: the form offers the CPU and the tiny backbone; a large backbone asks for
confirmation saying what it needs; a failed run shows its reason in one line with the traceback
folded away (the page stays short and never wider than the screen), and no Resume without a
checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from common.models import JobStatus
from tests.support.browser import (
    VIEWPORTS,
    assert_fits_viewport,
    log_in,
    page_at,
)
from tests.training_bridge.test_training_pages import TRACEBACK
from tests.training_bridge.training_fixtures import make_published_release
from training_bridge.models import TrainingRun
from training_bridge.services import training_run_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path("/work/shots/importpage")


@pytest.mark.parametrize("width", list(VIEWPORTS))
def test_the_training_pages_on_a_cpu_only_machine(
    live_server, chromium, curator, cpu_only_machine, width
):
    SHOTS.mkdir(parents=True, exist_ok=True)
    release = make_published_release()
    failed = training_run_create(release=release, backbone="tiny", start=False, name="no weights")
    TrainingRun.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED, error=TRACEBACK)
    page = page_at(chromium, width)
    log_in(
        page,
        f"{live_server.url}/dashboard/training/",
        username="curator",
        password="curator-password-1",
    )

    devices = page.locator("#id_device option").evaluate_all(
        "(options) => options.map(o => o.value)"
    )
    assert devices == ["cpu"]
    assert page.locator("#id_backbone").input_value() == "tiny"
    assert "no GPU: the tiny backbone is the default" in page.locator("#devices-note").inner_text()
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"training-list-{width}.png"), full_page=True)

    # A large backbone: the page asks first, saying what the run needs.
    page.select_option("#id_backbone", django_settings.LEPUS_DEFAULT_BACKBONE)
    page.get_by_role("button", name="Start training").click()
    needs = page.locator("#backbone-needs")
    needs.wait_for()
    assert "not found on this machine" in needs.locator('[data-need="weights"]').inner_text()
    assert "about 4 GB of weights in bf16" in needs.locator('[data-need="memory"]').inner_text()
    assert TrainingRun.objects.count() == 1
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"training-confirm-{width}.png"), full_page=True)

    # The failed run: one line of reason, the traceback folded, no Resume without a checkpoint.
    page.goto(f"{live_server.url}/dashboard/training/{failed.pk}/")
    reason = page.locator("#run-error")
    assert reason.inner_text() == (
        "teacher: OSError: We couldn't connect to 'https://huggingface.co' to load the files"
    )
    assert page.locator("#run-traceback").get_attribute("open") is None
    assert not page.locator("pre.traceback").is_visible()
    assert page.get_by_role("button", name="Resume from checkpoint").count() == 0
    assert page.locator("#no-checkpoint").is_visible()
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 1821, f"the failed run's page is {height} px tall"
    assert_fits_viewport(page)
    page.screenshot(path=str(SHOTS / f"training-failed-{width}.png"), full_page=True)

    page.locator("#run-traceback summary").click()
    assert page.locator("pre.traceback").is_visible()
    assert_fits_viewport(page)  # the traceback scrolls inside its box
    page.screenshot(path=str(SHOTS / f"training-failed-traceback-{width}.png"), full_page=True)
