"""Agreement of campaigns (and of any set of candidates, e.g. a release) from the database,
before and after QC, streamed in chunks, with the `agreement` command and the snapshot history."""

from __future__ import annotations

import json
import random
from io import StringIO

import krippendorff
import numpy as np
import pytest
from django.core.management import call_command

from annotation.models import AgreementSnapshot, CampaignCandidate, Judgment
from annotation.quality import agreement as agreement_service
from annotation.quality.agreement import agreement_for_items, campaign_agreement
from annotation.quality.controls import controls_generate
from annotation.quality.exclusions import judgments_exclude
from annotation.quality.run import qc_campaign_full
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db

KEYS = ("descriptiveness", "relevance", "fluency")


def _rated_campaign(workers: int = 7):
    """A sparse crowd: each candidate rated by 3 of `workers` people, values near its truth."""
    generator = random.Random(5)
    campaign = quality_crowd_campaign(clips=10, candidates_per_clip=3, quota=3)
    items = list(campaign.items.order_by("id"))
    people = [quality_worker(campaign, f"p{index}") for index in range(workers)]
    matrix = {key: np.full((workers, len(items)), np.nan) for key in KEYS}
    for column, item in enumerate(items):
        truth = {key: generator.randint(1, 5) for key in KEYS}
        for row in generator.sample(range(workers), 3):
            values = {
                key: min(5, max(1, truth[key] + generator.choice([-1, 0, 0, 1]))) for key in KEYS
            }
            quality_judge(people[row], item, values)
            for key in KEYS:
                matrix[key][row, column] = values[key]
    return campaign, items, people, matrix


def _reference_alpha(matrix: np.ndarray) -> float:
    return krippendorff.alpha(
        reliability_data=matrix, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
    )


def test_alpha_per_question_matches_the_krippendorff_package_and_streams_in_chunks(monkeypatch):
    campaign, _items, _people, matrix = _rated_campaign()

    figures = campaign_agreement(campaign=campaign)
    monkeypatch.setattr(agreement_service, "CHUNK_ROWS", 4)  # 30 items in 8 chunks
    chunked = campaign_agreement(campaign=campaign)

    for key in KEYS:
        expected = _reference_alpha(matrix[key])
        assert figures[key]["alpha_all"] == pytest.approx(expected, abs=1e-9)
        assert figures[key]["alpha_kept"] == pytest.approx(expected, abs=1e-9)
        assert (figures[key]["items"], figures[key]["judgments"]) == (30, 90)
        assert chunked[key]["alpha_all"] == pytest.approx(expected, abs=1e-9)


def test_after_qc_leaves_excluded_judgments_out_and_any_item_set_can_be_measured():
    campaign, items, people, matrix = _rated_campaign()
    excluded = list(Judgment.objects.filter(participation=people[0]))
    judgments_exclude(
        campaign=campaign,
        judgment_ids=[row.pk for row in excluded],
        excluded_by="curator",
        reason="x",
    )
    kept_matrix = matrix["relevance"].copy()
    kept_matrix[0, :] = np.nan

    figures = campaign_agreement(campaign=campaign)["relevance"]

    assert figures["alpha_all"] == pytest.approx(_reference_alpha(matrix["relevance"]), abs=1e-9)
    assert figures["alpha_kept"] == pytest.approx(_reference_alpha(kept_matrix), abs=1e-9)
    # A "release": a subset of candidates, by id or by queryset.
    subset = [item.pk for item in items[:12]]
    by_ids = agreement_for_items(subset, "relevance", kept_only=False)
    by_queryset = agreement_for_items(
        CampaignCandidate.objects.filter(pk__in=subset), "relevance", kept_only=False
    )
    assert by_ids == by_queryset
    assert by_ids["alpha"] == pytest.approx(_reference_alpha(matrix["relevance"][:, :12]), abs=1e-9)
    assert (by_ids["items"], by_ids["judgments"]) == (12, 36)
    assert agreement_for_items([], "relevance") == {"alpha": None, "items": 0, "judgments": 0}


def test_the_same_ratings_give_the_same_alpha_however_many_workers_gave_them():
    """Memory and the result depend on item × value counts, not on who rated."""
    few, items_few, _, _ = _rated_campaign(workers=3)
    figures_few = campaign_agreement(campaign=few)
    many = quality_crowd_campaign(slug="many", clips=10, candidates_per_clip=3, quota=3)
    items_many = list(many.items.order_by("id"))
    counter = 0
    for source, target in zip(items_few, items_many, strict=True):
        for judgment in Judgment.objects.filter(campaign_candidate=source):
            counter += 1
            quality_judge(quality_worker(many, f"once-{counter}"), target, judgment.values)

    assert campaign_agreement(campaign=many) == figures_few


def test_controls_are_left_out_and_the_command_prints_the_contract():
    campaign, _items, people, matrix = _rated_campaign()
    controls_generate(campaign=campaign, rate=1.0, kinds=["reference"])
    for item in CampaignCandidate.objects.filter(campaign=campaign, is_control=True)[:5]:
        quality_judge(people[1], item, dict.fromkeys(KEYS, 1))
        quality_judge(people[2], item, dict.fromkeys(KEYS, 5))

    out = StringIO()
    call_command("agreement", campaign.slug, "--json", "--snapshot", stdout=out)
    payload = json.loads(out.getvalue())

    assert set(payload) == {"questions"}
    assert set(payload["questions"]) == set(KEYS)
    for key in KEYS:
        assert set(payload["questions"][key]) == {"alpha_all", "alpha_kept", "items"}
        assert payload["questions"][key]["alpha_all"] == pytest.approx(
            _reference_alpha(matrix[key]), abs=1e-9
        )
        assert payload["questions"][key]["items"] == 30
    assert AgreementSnapshot.objects.filter(campaign=campaign).count() == 3


def test_every_qc_run_records_history_before_and_after():
    campaign, _items, _people, _matrix = _rated_campaign()
    qc_campaign_full(campaign=campaign)
    qc_campaign_full(campaign=campaign)
    rows = AgreementSnapshot.objects.filter(campaign=campaign, question_key="fluency")
    assert rows.count() == 2
    first = rows.order_by("computed_at").first()
    assert first.alpha_all == pytest.approx(first.alpha_kept) and first.items == 30
