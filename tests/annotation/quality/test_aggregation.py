"""Aggregation: means of kept judgments, overall, normalisation, half-up classes, finalisation."""

from __future__ import annotations

import numpy as np
import pytest

from annotation.models import CampaignCandidate, Judgment, ReviewItem, ReviewState, ReviewStatus
from annotation.quality.aggregation import _distinct_rows, aggregation_recompute, round_half_up
from annotation.quality.exclusions import judgments_exclude
from annotation.questions import default_questions, overall_only_questions
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db


def test_round_half_up_is_not_bankers_rounding():
    assert [round_half_up(value) for value in (1.5, 2.5, 3.5, 4.5, 2.4999999999, 3.49)] == [
        2,
        3,
        4,
        5,
        3,
        3,
    ]
    assert round(2.5) == 2  # what the service must not do


def test_distinct_rows_of_means_give_back_every_row_bit_for_bit():
    """The aggregates store builds one means JSON per distinct row (`_distinct_rows`): each
    candidate's code must lead back to exactly its own means, missing questions (NaN) included,
    and equal rows must share one code."""
    means = np.array(
        [
            [3.0, 4.5, np.nan],
            [10 / 3, 4.5, np.nan],
            [3.0, 4.5, np.nan],
            [np.nan, np.nan, np.nan],
            [3.0, 4.5, 2.0],
            [10 / 3, 4.5, np.nan],
            [3.0000000000000004, 4.5, np.nan],
        ]
    )
    distinct, code = _distinct_rows(means)

    assert len(distinct) == 5
    assert np.array_equal(distinct[code].view(np.int64), means.view(np.int64))
    assert code[0] == code[2] and code[1] == code[5]
    assert len(set(code[[0, 1, 3, 4, 6]].tolist())) == 5
    empty, empty_code = _distinct_rows(np.zeros((0, 3)))
    assert empty.shape == (0, 3) and empty_code.size == 0


def _campaign(**fields):
    return quality_crowd_campaign(clips=1, candidates_per_clip=2, quota=2, **fields)


def test_means_overall_of_the_criteria_normalised_and_class():
    campaign = _campaign()
    item, other = campaign.items.order_by("id")
    first, second = quality_worker(campaign, "a"), quality_worker(campaign, "b")
    quality_judge(first, item, {"descriptiveness": 2, "relevance": 3, "fluency": 4})
    quality_judge(second, item, {"descriptiveness": 3, "relevance": 3, "fluency": 5})

    changed = aggregation_recompute(campaign=campaign)

    assert changed == 1  # the other candidate has no judgment: its defaults are already right
    item.refresh_from_db()
    assert item.means == {"descriptiveness": 2.5, "relevance": 3.0, "fluency": 4.5}
    assert item.overall == pytest.approx(10 / 3)
    assert item.normalized == pytest.approx((10 / 3 - 1) / 4)
    assert item.training_class == 3
    assert item.rating_range == 1
    assert (item.judgments_total, item.kept_judgments) == (2, 2)
    assert item.is_finalised is True and item.finalised_at is not None
    other.refresh_from_db()
    assert other.means == {} and other.overall is None and other.normalized is None
    assert other.training_class is None and other.is_finalised is False
    # A second recompute writes nothing: the stored values are already consistent.
    assert aggregation_recompute(campaign=campaign) == 0


def test_overall_question_is_used_when_the_campaign_has_one_and_halves_round_up():
    questions = overall_only_questions() + default_questions()[:1]
    campaign = _campaign(questions=questions, overall_question_key="overall")
    item = campaign.items.order_by("id").first()
    for name, overall in (("a", 2), ("b", 3)):
        quality_judge(
            quality_worker(campaign, name), item, {"overall": overall, "descriptiveness": 5}
        )

    aggregation_recompute(campaign=campaign)

    item.refresh_from_db()
    assert item.overall == 2.5  # the explicit question, not the mean of both questions
    assert item.training_class == 3  # half up
    assert item.normalized == pytest.approx(0.375)


def test_excluded_judgments_do_not_count_and_finalisation_needs_the_quota_of_kept():
    campaign = _campaign()
    item = campaign.items.order_by("id").first()
    kept = quality_judge(
        quality_worker(campaign, "a"), item, dict.fromkeys(campaign.question_keys, 4)
    )
    dropped = quality_judge(
        quality_worker(campaign, "b"), item, dict.fromkeys(campaign.question_keys, 1)
    )
    aggregation_recompute(campaign=campaign)
    item.refresh_from_db()
    assert item.overall == 2.5 and item.is_finalised

    judgments_exclude(
        campaign=campaign, judgment_ids=[dropped.pk], excluded_by="curator", reason="test"
    )
    aggregation_recompute(campaign=campaign)

    item.refresh_from_db()
    assert item.means == dict.fromkeys(campaign.question_keys, 4.0)
    assert (item.judgments_total, item.kept_judgments) == (2, 1)
    assert item.is_finalised is False and item.finalised_at is None  # 1 kept < quota 2
    assert item.slots_taken == 1  # the slot reopened
    assert Judgment.objects.get(pk=kept.pk).is_excluded is False


def test_an_expert_resolution_wins_and_finalises_controls_and_dropped_never_do():
    campaign = _campaign()
    item, control_like = campaign.items.order_by("id")
    quality_judge(quality_worker(campaign, "a"), item, dict.fromkeys(campaign.question_keys, 1))
    review = ReviewItem.objects.create(
        campaign=campaign, campaign_candidate=item, status=ReviewStatus.RESOLVED, rating_range=4
    )
    CampaignCandidate.objects.filter(pk=item.pk).update(
        resolution={"values": {"relevance": 5.0}}, review_state=ReviewState.RESOLVED
    )

    aggregation_recompute(campaign=campaign)

    item.refresh_from_db()
    assert item.means == {"descriptiveness": 1.0, "relevance": 5.0, "fluency": 1.0}
    assert item.overall == pytest.approx(7 / 3)
    assert item.kept_judgments == 1 and item.is_finalised is True  # resolved by review
    assert item.review_state == ReviewState.RESOLVED
    assert review.pk

    CampaignCandidate.objects.filter(pk=item.pk).update(dropped=True)
    CampaignCandidate.objects.filter(pk=control_like.pk).update(is_control=True)
    for name in ("b", "c"):
        quality_judge(
            quality_worker(campaign, name), control_like, dict.fromkeys(campaign.question_keys, 5)
        )
    aggregation_recompute(campaign=campaign)
    item.refresh_from_db()
    control_like.refresh_from_db()
    assert item.is_finalised is False
    assert control_like.kept_judgments == 2 and control_like.is_finalised is False
