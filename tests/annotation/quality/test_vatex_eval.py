"""Quality control on the real VATEX-EVAL import (data/vatex_eval/ through `vatex_eval_import`:
18,000 candidates × 3 anonymous rater slots)."""

from __future__ import annotations

import json
from io import StringIO

import krippendorff
import numpy as np
import pytest
from django.core.management import call_command

from annotation.models import (
    Campaign,
    CampaignCandidate,
    Judgment,
    ParticipationStatus,
    ReviewItem,
    ReviewStatus,
    WorkerExclusion,
)
from annotation.quality.agreement import agreement_for_items
from tests.annotation.quality.factories import (
    quality_delete_vatex_eval,
    quality_import_vatex_eval,
    vatex_eval_rows,
)


@pytest.fixture(scope="module")
def quality_vatex_eval(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """Imported once per module (committed), removed afterwards; each test rolls back its own
    changes."""
    with django_db_blocker.unblock():
        quality_delete_vatex_eval()
        campaign = quality_import_vatex_eval()
    yield campaign.pk
    with django_db_blocker.unblock():
        quality_delete_vatex_eval()


@pytest.fixture(scope="module")
def quality_vatex_eval_scores() -> dict[str, list[int]]:
    """external id of each candidate -> its three ratings, straight from the file."""
    scores = {}
    for clip_id, _texts, ratings, _refs in vatex_eval_rows():
        for index, row in enumerate(ratings):
            scores[f"vatex-eval:{clip_id}:{index}"] = row
    return scores


def _run(command: str, *args: str) -> dict:
    out = StringIO()
    call_command(command, *args, "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.django_db
def test_ordinal_alpha_over_the_three_slots_matches_the_krippendorff_package(
    quality_vatex_eval, quality_vatex_eval_scores
):
    reliability = np.array(list(quality_vatex_eval_scores.values()), dtype=float).T
    expected = krippendorff.alpha(
        reliability_data=reliability, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
    )
    assert expected == pytest.approx(0.6168, abs=0.0005)

    figures = _run("agreement", "vatex-eval")
    assert set(figures) == {"questions"}
    assert set(figures["questions"]) == {"overall"}
    overall = figures["questions"]["overall"]
    assert overall["alpha_all"] == pytest.approx(expected, abs=1e-9)
    assert overall["alpha_kept"] == pytest.approx(expected, abs=1e-9)
    assert overall["items"] == 18000

    items = CampaignCandidate.objects.filter(campaign_id=quality_vatex_eval)
    direct = agreement_for_items(items, "overall", kept_only=True)
    assert direct == {
        "alpha": pytest.approx(expected, abs=1e-9),
        "items": 18000,
        "judgments": 54000,
    }


@pytest.mark.django_db
def test_run_qc_queues_exactly_the_candidates_whose_ratings_span_three_or_more(
    quality_vatex_eval, quality_vatex_eval_scores
):
    summary = _run("run_qc", "vatex-eval")

    wide = {key for key, row in quality_vatex_eval_scores.items() if max(row) - min(row) >= 3}
    assert len(wide) == 1153
    assert summary == {
        "workers": 3,
        "excluded": [],
        "flagged": [],
        "judgments_excluded": 0,
        "review_items": 1153,
    }
    queued = set(
        ReviewItem.objects.filter(
            campaign_id=quality_vatex_eval, status=ReviewStatus.OPEN
        ).values_list("campaign_candidate__candidate__external_id", flat=True)
    )
    assert queued == wide
    # Imported rater slots never trip identity or timing rules.
    assert not WorkerExclusion.objects.exists()
    assert not Judgment.objects.filter(campaign_id=quality_vatex_eval, is_excluded=True).exists()
    assert set(
        Campaign.objects.get(pk=quality_vatex_eval).participations.values_list("status", flat=True)
    ) == {ParticipationStatus.ACTIVE}

    queue = _run("review_queue", "vatex-eval")
    assert queue["open"] == 1153 and queue["resolved"] == 0
    assert len(queue["items"]) == 1153
    ranges = [row["range"] for row in queue["items"]]
    assert ranges == sorted(ranges, reverse=True)  # worst first
    assert ranges[0] == 4 and set(ranges) == {3, 4}


@pytest.mark.django_db
def test_aggregates_are_the_normalised_mean_with_half_up_classes(
    quality_vatex_eval, quality_vatex_eval_scores
):
    _run("run_qc", "vatex-eval")

    rows = CampaignCandidate.objects.filter(campaign_id=quality_vatex_eval).values_list(
        "candidate__external_id",
        "means",
        "overall",
        "normalized",
        "training_class",
        "kept_judgments",
        "is_finalised",
        "rating_range",
    )
    seen = 0
    for external_id, means, overall, normalized, training_class, kept, finalised, span in rows:
        ratings = quality_vatex_eval_scores[external_id]
        mean = sum(ratings) / 3
        assert means == {"overall": pytest.approx(mean)}
        assert overall == pytest.approx(mean)
        assert 0.0 <= normalized <= 1.0
        assert normalized == pytest.approx((mean - 1) / 4)
        # Half up: a mean of 2.5 can't happen with three ratings, but 3.667 -> 4, 3.333 -> 3.
        assert training_class == int(np.floor(round(mean, 9) + 0.5))
        assert kept == 3 and finalised is True
        assert span == max(ratings) - min(ratings)
        seen += 1
    assert seen == 18000
