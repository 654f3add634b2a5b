"""The rubric on the rating page, in Chromium at 1280 and 390 px: under each question the levels
of that question (a new campaign's per-criterion rubric), or the paper's one holistic guide, said
to apply to every question, for a campaign that chose it."""

from __future__ import annotations

import pytest

from annotation.questions import PAPER_LEVELS, PER_CRITERION_LEVELS, Rubric
from tests.annotation.crowd import test_worker_page_browser as rating_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

mp4_file = rating_page.mp4_file
chromium = rating_page.chromium
browser = rating_page.browser

VIEWPORTS = {"wide": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
PID = "5f0000000000000000000e03"


def _rows(table) -> list[tuple[str, str]]:
    return [
        (row.locator("th").inner_text(), row.locator("td").inner_text())
        for row in table.locator("tbody tr").all()
    ]


def _expected(levels) -> list[tuple[str, str]]:
    return [(f"{level['value']} — {level['label']}", level["description"]) for level in levels]


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_each_question_shows_the_levels_that_apply_to_it(live_server, browser, mp4_file, viewport):
    campaign, _clips = rating_page.make_campaign(mp4_file, clips=1, slug=f"criteria-{viewport}")
    page = browser.new_page()
    page.set_viewport_size(VIEWPORTS[viewport])
    page.goto(f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID={PID}")

    for key, label in (
        ("descriptiveness", "Descriptiveness"),
        ("relevance", "Relevance"),
        ("fluency", "Fluency"),
    ):
        section = page.get_by_role("region", name=label)
        assert section.get_by_role("heading", name=label).is_visible()
        table = section.locator("table.rubric")
        assert table.is_visible()
        assert _rows(table) == _expected(PER_CRITERION_LEVELS[key])
    consent = page.locator("#consent").inner_text()
    assert "fundamentally unrelated to the video" not in consent
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORTS[viewport]["width"]

    # On the task: the guide lists each question's levels, and each rating's tooltip is its own.
    page.get_by_role("button", name="I agree — start").click()
    page.locator("#candidates fieldset").first.wait_for()
    page.locator(".guide summary").click()
    assert page.locator('.guide dl[data-question="fluency"] dd').all_inner_texts() == [
        level["description"] for level in PER_CRITERION_LEVELS["fluency"]
    ]
    fluency_bad = page.get_by_role("radio", name="Fluency: 1 — Bad").first
    assert fluency_bad.evaluate("input => input.closest('label').title") == (
        "Broken or incomprehensible text."
    )
    relevance_best = page.get_by_role("radio", name="Relevance: 5 — Excellent").first
    assert relevance_best.evaluate("input => input.closest('label').title") == (
        "Everything the caption says is in the clip; nothing is wrong or invented."
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORTS[viewport]["width"]


def test_a_campaign_on_the_papers_rubric_shows_its_one_guide_for_every_question(
    live_server, browser, mp4_file
):
    campaign, _clips = rating_page.make_campaign(
        mp4_file, clips=1, slug="paper", rubric=Rubric.PAPER
    )
    page = browser.new_page()
    page.goto(f"{live_server.url}/w/{campaign.slug}/?PROLIFIC_PID={PID}")

    tables = page.locator("table.rubric")
    assert tables.count() == 1
    assert page.get_by_text("The same guide applies to every question.").is_visible()
    assert _rows(tables.first) == _expected(PAPER_LEVELS)
