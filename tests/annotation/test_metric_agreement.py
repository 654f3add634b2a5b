"""The campaign metric against the crowd (issue 28, point 2): Kendall's tau so far and the candidates
where they disagree most, equal on the quality summary API and the campaign page (to the page's
three decimals), against tau computed here from the judgment rows read with plain SQL; and the
panel in Debian's Chromium at 1280 and 390 px (screenshots to $LEPUS_SCREENSHOT_DIR, else a
temporary folder)."""

from __future__ import annotations

import os
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from django.db import connection
from scipy.stats import kendalltau

from annotation.figures import NO_METRIC, TOO_FEW_PAIRS
from annotation.models import Campaign, CampaignCandidate, Judgment
from tests.metrics.vatex_eval_data import vatex_eval_subset
from tests.support.browser import (
    assert_fits_viewport,
    assert_no_sideways_scroll,
    chromium_browser,
    log_in,
    page_at,
)
from tests.training_bridge.metric_benchmark_data import build_vatex_eval_campaign

pytestmark = pytest.mark.django_db(transaction=True)


def _metric_campaign() -> tuple[Campaign, dict[int, float]]:
    """24 VATEX-EVAL candidates (3 raters each) naming a metric; 20 have a planted metric score
    (a function of the id, unrelated to the ratings), and one judgment of the first is excluded."""
    campaign = build_vatex_eval_campaign(vatex_eval_subset(24))
    Campaign.objects.filter(pk=campaign.pk).update(metric="plugin:bleu1")
    campaign.refresh_from_db()
    ids = sorted(CampaignCandidate.objects.filter(campaign=campaign).values_list("id", flat=True))
    planted = {pk: 1.0 + ((pk * 7) % 17) / 4.0 for pk in ids[:20]}
    for pk, score in planted.items():
        CampaignCandidate.objects.filter(pk=pk).update(metric_score=score, metric_uncertainty=0.3)
    first = Judgment.objects.filter(campaign_candidate_id=ids[0]).order_by("id").first()
    assert first is not None
    Judgment.objects.filter(pk=first.pk).update(is_excluded=True)
    return campaign, planted


def _sql_crowd_means(campaign: Campaign) -> dict[int, float]:
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT campaign_candidate_id, avg(("values"->>'overall')::float) """
            "FROM annotation_judgment WHERE campaign_id = %s AND NOT is_excluded "
            "GROUP BY campaign_candidate_id",
            [campaign.pk],
        )
        return {item_id: float(mean) for item_id, mean in cursor.fetchall()}


def _three(value: float) -> str:
    return str(Decimal(str(value)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP))


def _expected(campaign: Campaign, planted: dict[int, float]) -> tuple[float, list[int]]:
    crowd = _sql_crowd_means(campaign)
    ids = sorted(planted)
    tau = float(kendalltau([planted[i] for i in ids], [crowd[i] for i in ids])[0])
    order = sorted(ids, key=lambda i: (-abs(planted[i] - crowd[i]), i))[:10]
    return tau, order


def test_the_api_and_the_page_show_the_same_tau_and_disagreements(curator_client):
    campaign, planted = _metric_campaign()
    tau, order = _expected(campaign, planted)
    crowd = _sql_crowd_means(campaign)
    api = curator_client.get(f"/api/v1/campaigns/{campaign.slug}/quality").json()
    figure = api["metric_agreement"]
    assert figure["metric"] == "plugin:bleu1"
    assert (figure["candidates_scored"], figure["pairs"]) == (20, 20)
    assert figure["kendall_tau"] == pytest.approx(tau, abs=1e-12) and figure["reason"] == ""
    assert [row["campaign_candidate_id"] for row in figure["disagreements"]] == order
    for row in figure["disagreements"]:
        item = row["campaign_candidate_id"]
        assert row["metric_score"] == planted[item]
        assert row["crowd_mean"] == pytest.approx(crowd[item], abs=1e-9)
        assert row["difference"] == pytest.approx(planted[item] - crowd[item], abs=1e-9)
        assert row["browse_url"] == f"/dashboard/datasets/candidates/{item}/"
    page = curator_client.get(f"/dashboard/campaigns/{campaign.slug}/").content.decode()
    shown = re.search(r'data-figure="kendall_tau">([^<]+)<', page)
    assert shown is not None and shown.group(1) == _three(figure["kendall_tau"])
    assert re.search(r'data-figure="pairs">(\d+)<', page).group(1) == "20"  # type: ignore[union-attr]
    rows = re.findall(r'<tr data-item="(\d+)"><td><a href="([^"]+)"', page)
    assert rows == [(str(item), f"/dashboard/datasets/candidates/{item}/") for item in order]
    for row in figure["disagreements"]:
        cell = re.search(
            rf'data-item="{row["campaign_candidate_id"]}">.*?data-field="difference">([^<]+)<',
            page,
            re.S,
        )
        assert cell is not None and float(cell.group(1)) == pytest.approx(row["difference"], 0.01)


def test_without_a_metric_or_pairs_the_reason_is_shown(curator_client):
    campaign = build_vatex_eval_campaign(vatex_eval_subset(6))
    figure = curator_client.get(f"/api/v1/campaigns/{campaign.slug}/quality").json()
    assert figure["metric_agreement"]["reason"] == NO_METRIC
    page = curator_client.get(f"/dashboard/campaigns/{campaign.slug}/").content.decode()
    assert f"Off: {NO_METRIC}." in page
    Campaign.objects.filter(pk=campaign.pk).update(metric="plugin:bleu1")
    item = CampaignCandidate.objects.filter(campaign=campaign).first()
    assert item is not None
    CampaignCandidate.objects.filter(pk=item.pk).update(metric_score=3.0)
    figure = curator_client.get(f"/api/v1/campaigns/{campaign.slug}/quality").json()
    agreement = figure["metric_agreement"]
    assert (agreement["pairs"], agreement["kendall_tau"]) == (1, None)
    assert agreement["reason"] == TOO_FEW_PAIRS


@pytest.mark.browser
def test_the_panel_in_chromium_at_desktop_and_phone_width(live_server, curator, tmp_path):
    campaign, planted = _metric_campaign()
    tau, order = _expected(campaign, planted)
    shots = Path(os.environ.get("LEPUS_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    url = f"{live_server.url}/dashboard/campaigns/{campaign.slug}/"
    with chromium_browser() as browser:
        for width in ("wide", "phone"):
            page = page_at(browser, width)
            log_in(page, url, username="curator", password="curator-password-1")
            panel = page.locator("#metric-agreement")
            assert panel.locator('[data-figure="kendall_tau"]').inner_text() == _three(tau)
            links = panel.get_by_test_id("metric-disagreements").locator(
                "tbody tr td:first-child a"
            )
            assert links.count() == 10
            first = links.nth(0)
            assert first.get_attribute("href") == f"/dashboard/datasets/candidates/{order[0]}/"
            assert_fits_viewport(page)
            # The whole campaign page shows every card's full width (the rules table's long
            # settings wrap on a phone).
            assert_no_sideways_scroll(page)
            # The panel shows its whole width: the numbers are in view on a phone too.
            assert panel.evaluate(
                "(panel) => [panel, ...panel.querySelectorAll('*')].every("
                "(element) => element.scrollWidth <= element.clientWidth + 1)"
            )
            panel.scroll_into_view_if_needed()
            size = page.viewport_size["width"]
            panel.screenshot(path=str(shots / f"campaign-metric-agreement-{size}.png"))
            first.click()
            page.wait_for_url(f"**/dashboard/datasets/candidates/{order[0]}/")
            page.close()
