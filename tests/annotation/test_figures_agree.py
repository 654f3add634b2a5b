"""Figures that disagreed (issue 24, point 6), now read equal off every page, API and the database.

- A candidate's judgments: before QC the data browser's candidate list showed "0 (0)" (QC's
  aggregate columns, which an imported campaign only gets at its first run) for a candidate
  whose own page listed 3. The list, the clip page, the candidate page and the review item page
  now all show the count of its judgment rows.
- Agreement: the QC run's "before QC" alpha was measured over the judgments still kept when the
  run started (so without those a curator or an earlier pass had excluded), while the agreement
  API's is over every judgment, as docs/figures.md defines it. After a worker is excluded and QC
  runs, the QC run's record, the stored snapshot, the quality summary API, the agreement API and
  the campaign page show the same alphas, bit for bit (the page to its three decimals), and the
  `krippendorff` package agrees over the judgment rows read here with plain SQL.
"""

from __future__ import annotations

import random
import re

import krippendorff
import numpy as np
import pytest
from django.db import connection
from django.urls import reverse

from annotation.models import (
    AgreementSnapshot,
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    QCRun,
    ReviewItem,
)
from annotation.quality.exclusions import worker_exclude
from annotation.quality.run import qc_run_inline
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker
from tests.datasets_app.helpers import EXAMPLES, run_command

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = ("descriptiveness", "relevance", "fluency")


def _sql_counts(item_id: int) -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE NOT is_excluded) FROM annotation_judgment "
            "WHERE campaign_candidate_id = %s",
            [item_id],
        )
        total, kept = cursor.fetchone()
    return int(total), int(kept)


def _cell(html: str, pattern: str) -> str:
    match = re.search(pattern, html, re.S)
    assert match is not None, pattern
    return match.group(1)


def _browser_figures(client, item: CampaignCandidate) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """A candidate's judgments as the candidate list, the clip page and the candidate page show
    them, each as "total (kept)"."""
    listed = client.get(
        reverse("annotation:browse-candidates"), {"campaign": item.campaign.slug, "size": 100}
    ).content.decode()
    clip = client.get(reverse("annotation:browse-clip", args=[item.clip_id])).content.decode()
    page = client.get(reverse("annotation:browse-candidate", args=[item.pk])).content.decode()
    kept_total = _cell(
        clip, rf'data-item="{item.pk}">[^<]*</a>: (?:<span data-field="judgments">)?(\d+/\d+)'
    )
    kept, total = kept_total.split("/")
    return {
        "list": _cell(
            listed, rf'data-candidate="{item.pk}".*?<td data-field="judgments">([^<]+)</td>'
        ),
        "clip": f"{total} ({kept})",
        "page": "{} ({})".format(
            _cell(page, r'data-field="judgments_total">(\d+)<'),
            _cell(page, r'data-field="kept_judgments">(\d+)<'),
        ),
    }


def test_an_imported_candidates_judgments_read_the_same_everywhere_before_qc(curator_client):
    imported = run_command("import_vatex_eval", str(EXAMPLES / "vatex_eval.json"))
    assert imported["ok"] is True
    items = list(CampaignCandidate.objects.filter(campaign__slug="vatex-eval").order_by("pk"))
    assert QCRun.objects.count() == 0
    for item in items:
        # QC has not run: its aggregate columns still say nothing was judged.
        assert (item.judgments_total, item.kept_judgments) == (0, 0)
        total, kept = _sql_counts(item.pk)
        assert (total, kept) == (3, 3)
        assert _browser_figures(curator_client, item) == {
            "list": "3 (3)",
            "clip": "3 (3)",
            "page": "3 (3)",
        }


def test_a_judgment_excluded_and_one_arriving_after_qc_are_counted_everywhere(
    curator_client, curator
):
    campaign = quality_crowd_campaign(slug="counted", clips=1, candidates_per_clip=1, quota=3)
    item = CampaignCandidate.objects.get(campaign=campaign)
    for name, values in (("c-1", (1, 2, 3)), ("c-2", (5, 1, 3)), ("c-3", (3, 2, 4))):
        quality_judge(quality_worker(campaign, name), item, dict(zip(KEYS, values, strict=True)))
    qc_run_inline(campaign=campaign)
    review = ReviewItem.objects.get(campaign_candidate=item)
    # After QC: one judgment excluded by hand (as review does, without re-aggregating here) and
    # a fourth arriving before any pass has aggregated it.
    Judgment.objects.filter(
        campaign_candidate=item, participation__worker__external_id="c-2"
    ).update(is_excluded=True, excluded_by="review")
    quality_judge(quality_worker(campaign, "c-4"), item, dict.fromkeys(KEYS, 4), take_slot=False)
    item.refresh_from_db()
    assert (item.judgments_total, item.kept_judgments) == (3, 3)  # QC's, stale now
    assert _sql_counts(item.pk) == (4, 3)
    assert _browser_figures(curator_client, item) == {
        "list": "4 (3)",
        "clip": "4 (3)",
        "page": "4 (3)",
    }
    review_page = curator_client.get(
        reverse("annotation:review-item", args=[campaign.slug, review.pk])
    ).content.decode()
    assert '<span data-field="kept_judgments">3</span> kept of ' in review_page
    assert '<span data-field="judgments_total">4</span> judgments' in review_page


# ----------------------------------------------------------------------------------------------
# Agreement
# ----------------------------------------------------------------------------------------------


def _reference_alpha(campaign: Campaign, key: str, *, kept_only: bool) -> float:
    """Krippendorff's alpha (ordinal) by the `krippendorff` package, over the judgment rows read
    here with plain SQL (controls left out)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT j.participation_id, j.campaign_candidate_id, (j."values"->>%s)::int
                FROM annotation_judgment j
                JOIN annotation_campaigncandidate cc ON cc.id = j.campaign_candidate_id
                WHERE j.campaign_id = %s AND NOT cc.is_control
                {"AND NOT j.is_excluded" if kept_only else ""}""",
            [key, campaign.pk],
        )
        rows = cursor.fetchall()
    raters = sorted({row[0] for row in rows})
    items = sorted({row[1] for row in rows})
    data = np.full((len(raters), len(items)), np.nan)
    for rater, item, value in rows:
        data[raters.index(rater), items.index(item)] = value
    return float(
        krippendorff.alpha(
            reliability_data=data, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
        )
    )


def test_before_and_after_qc_alphas_are_the_same_on_the_qc_record_the_apis_and_the_page(
    curator_client, curator
):
    generator = random.Random(246)
    # Quota 4 and one worker more than the quota: candidates rated 4 and 5 times, so the
    # coincidences divide by 3 and 4 (inexact in binary), the case where summing in another
    # order used to change the last bits.
    campaign = quality_crowd_campaign(slug="agreed", clips=4, candidates_per_clip=3, quota=4)
    items = list(CampaignCandidate.objects.filter(campaign=campaign).order_by("pk"))
    agreeing = [quality_worker(campaign, f"agree-{index}") for index in range(3)]
    random_rater = quality_worker(campaign, "random-rater")
    for position, item in enumerate(items):
        truth = {key: 1 + (position + offset) % 5 for offset, key in enumerate(KEYS)}
        for participation in agreeing:
            values = {
                key: min(5, max(1, value + generator.choice((-1, 0, 0, 1))))
                for key, value in truth.items()
            }
            quality_judge(participation, item, values)
        if position % 3:  # the random rater did two candidates in three
            quality_judge(random_rater, item, {key: generator.randint(1, 5) for key in KEYS})
    # A curator excludes the random rater before QC runs: "before QC" must still count them.
    worker_exclude(
        participation=Participation.objects.get(pk=random_rater.pk), actor=curator, reason="random"
    )
    run = qc_run_inline(campaign=campaign)
    assert run.status == "succeeded"
    recorded = run.summary["agreement"]
    snapshots = {
        row.question_key: row for row in AgreementSnapshot.objects.filter(campaign=campaign)
    }
    api = curator_client.get(f"/api/v1/campaigns/{campaign.slug}/agreement").json()["questions"]
    summary = curator_client.get(f"/api/v1/campaigns/{campaign.slug}/quality").json()["agreement"]
    page = curator_client.get(
        reverse("annotation:campaign-detail", args=[campaign.slug])
    ).content.decode()
    for key in KEYS:
        every = _reference_alpha(campaign, key, kept_only=False)
        kept = _reference_alpha(campaign, key, kept_only=True)
        # The excluded worker's judgments change alpha: the two figures measure different sets.
        assert round(every, 3) != round(kept, 3), key
        figures = {
            "record": (recorded[key]["alpha_all"], recorded[key]["alpha_kept"]),
            "snapshot": (snapshots[key].alpha_all, snapshots[key].alpha_kept),
            "agreement API": (api[key]["alpha_all"], api[key]["alpha_kept"]),
            "quality summary API": (summary[key]["alpha_all"], summary[key]["alpha_kept"]),
        }
        assert len(set(figures.values())) == 1, (key, figures)
        alpha_all, alpha_kept = figures["record"]
        assert alpha_all == pytest.approx(every, abs=1e-12)
        assert alpha_kept == pytest.approx(kept, abs=1e-12)
        assert recorded[key]["items"] == snapshots[key].items == api[key]["items"] == len(items)
        assert recorded[key]["judgments"] == snapshots[key].judgments == api[key]["judgments"]
        caption = _cell(
            page, rf'<figure[^>]*data-question="{key}".*?<figcaption>(.*?)</figcaption>'
        )
        assert f'<span data-figure="alpha_all">{alpha_all:.3f}</span>' in caption
        assert f'<span data-figure="alpha_kept">{alpha_kept:.3f}</span>' in caption
