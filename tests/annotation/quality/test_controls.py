"""Control items: generation from the data, expected ranges, counters, invisibility to workers,
and that they never reach review, the leaderboard or finalisation."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from annotation.models import CampaignCandidate, CampaignClip
from annotation.quality.controls import controls_generate, shuffle_words
from annotation.quality.run import qc_campaign_full
from annotation.quality.selectors import system_leaderboard
from datasets_app.models import CandidateCaption, CandidateKind, ControlType, ReferenceCaption
from tests.annotation.crowd_factories import crowd_campaign, crowd_join
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db


def test_controls_are_made_from_the_data_with_expected_ranges_and_counters():
    campaign = quality_crowd_campaign(clips=12, candidates_per_clip=2, quota=3)
    open_before = sum(CampaignClip.objects.values_list("open_slots", flat=True))

    created = controls_generate(campaign=campaign, rate=0.5, seed=7)

    assert created == 6
    controls = list(
        CandidateCaption.objects.filter(kind=CandidateKind.CONTROL).select_related("clip")
    )
    assert len(controls) == 6
    assert {control.control_type for control in controls} == {
        ControlType.REFERENCE,
        ControlType.OTHER_CLIP,
        ControlType.SHUFFLED,
    }
    for control in controls:
        own = list(
            ReferenceCaption.objects.filter(clip=control.clip).values_list("text", flat=True)
        )
        spec = control.control_spec
        assert control.system is None and spec["campaign"] == campaign.slug
        if control.control_type == ControlType.REFERENCE:
            assert control.text in own
            assert spec["expected"] == {
                "descriptiveness": [3, 5],
                "relevance": [4, 5],
                "fluency": [4, 5],
            }
        elif control.control_type == ControlType.OTHER_CLIP:
            assert control.text not in own
            assert spec["source"]["from_clip"] != control.clip_id
            assert spec["expected"] == {"descriptiveness": [1, 2], "relevance": [1, 2]}
        else:
            source = spec["source"]["shuffled_from"]
            assert source in own and control.text != source.rstrip(".")
            assert sorted(control.text.split()) == sorted(source.rstrip(".").split())
            assert spec["expected"] == {"fluency": [1, 2]}
    items = CampaignCandidate.objects.filter(campaign=campaign, is_control=True)
    assert items.count() == 6 and {item.quota for item in items} == {3}
    assert sum(CampaignClip.objects.values_list("open_slots", flat=True)) == open_before + 18
    assert sorted(CampaignClip.objects.values_list("candidates", flat=True)) == [2] * 6 + [3] * 6
    campaign.refresh_from_db()
    assert campaign.control_rate == 0.5 and campaign.control_settings["seed"] == 7

    # Idempotent: the same target share adds nothing; a higher one adds the difference.
    assert controls_generate(campaign=campaign, rate=0.5, seed=7) == 0
    assert controls_generate(campaign=campaign, rate=0.75, seed=7) == 3


def test_generation_is_deterministic_for_a_seed():
    texts = []
    for slug in ("one", "two"):
        campaign = quality_crowd_campaign(slug=slug, clips=6, candidates_per_clip=1)
        controls_generate(campaign=campaign, rate=1.0, seed=11)
        texts.append(
            [
                (item.clip.vatex_id.split("-", 1)[1], item.candidate.control_type)
                for item in CampaignCandidate.objects.filter(campaign=campaign, is_control=True)
                .select_related("clip", "candidate")
                .order_by("clip__vatex_id")
            ]
        )
    assert texts[0] == texts[1]


def test_campaign_specific_expected_ranges_and_kinds():
    campaign = quality_crowd_campaign(
        clips=4,
        candidates_per_clip=1,
        control_settings={"expected": {"reference": {"relevance": [5, 5]}}},
    )
    assert controls_generate(campaign=campaign, rate=1.0, kinds=["reference"]) == 4
    specs = CandidateCaption.objects.filter(kind=CandidateKind.CONTROL).values_list(
        "control_type", "control_spec"
    )
    assert {(kind, str(spec["expected"])) for kind, spec in specs} == {
        ("reference", "{'relevance': [5, 5]}")
    }
    with pytest.raises(ValueError):
        controls_generate(campaign=campaign, rate=1.5)
    with pytest.raises(ValueError):
        controls_generate(campaign=campaign, rate=0.5, kinds=["nonsense"])


def test_shuffling_needs_enough_words():
    import random

    assert shuffle_words("a dog runs", random.Random(1)) is None
    shuffled = shuffle_words("a man plays a red guitar.", random.Random(1))
    assert shuffled and sorted(shuffled.split()) == sorted(
        ["a", "man", "plays", "a", "red", "guitar"]
    )


def test_workers_cannot_tell_a_control_from_a_candidate():
    campaign = crowd_campaign(clips=1, candidates_per_clip=2, judgments_per_candidate=1)
    controls_generate(campaign=campaign, rate=1.0, kinds=["reference"])
    token, _ = crowd_join(campaign, "curious")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Worker {token}")

    payload = client.post("/api/v1/worker/assignments/next", {}, format="json").json()

    assert len(payload["candidates"]) == 3
    assert all(set(candidate) == {"id", "text"} for candidate in payload["candidates"])
    body = str(payload).lower()
    assert "control" not in body and "expected" not in body


def test_controls_stay_out_of_review_the_leaderboard_and_finalisation():
    campaign = quality_crowd_campaign(clips=2, candidates_per_clip=1, quota=2)
    controls_generate(campaign=campaign, rate=1.0, kinds=["other_clip"])
    first, second = quality_worker(campaign, "a"), quality_worker(campaign, "b")
    for item in CampaignCandidate.objects.filter(campaign=campaign):
        # A wild disagreement on every item, controls included.
        quality_judge(first, item, {"descriptiveness": 1, "relevance": 1, "fluency": 2})
        quality_judge(second, item, {"descriptiveness": 5, "relevance": 5, "fluency": 4})

    summary = qc_campaign_full(campaign=campaign)

    assert summary["review_items"] == 2  # the two model outputs, not the two controls
    controls = CampaignCandidate.objects.filter(campaign=campaign, is_control=True)
    assert controls.count() == 2
    assert set(controls.values_list("review_state", "is_finalised")) == {("", False)}
    board = system_leaderboard(campaign=campaign)
    assert sum(row["candidates"] for row in board) == 2
