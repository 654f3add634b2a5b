"""Worker statistics and the QC rules, on small campaigns with chosen ratings and timings."""

from __future__ import annotations

import pytest

from annotation.models import (
    AuditEntry,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    Participation,
    ParticipationStatus,
    Platform,
    ReviewAction,
    WorkerExclusion,
    WorkerQCStats,
)
from annotation.quality.rules import DEFAULT_QC_RULES, qc_rules_merge, qc_rules_validate
from annotation.quality.run import qc_campaign_full, qc_summary
from tests.annotation.quality.factories import quality_crowd_campaign, quality_judge, quality_worker

pytestmark = pytest.mark.django_db

KEYS = ("descriptiveness", "relevance", "fluency")


def _values(value: int | tuple[int, int, int]) -> dict[str, int]:
    if isinstance(value, int):
        return dict.fromkeys(KEYS, value)
    return dict(zip(KEYS, value, strict=True))


def _honest_pattern(index: int) -> tuple[int, int, int]:
    """Varied but agreeing ratings, a function of the candidate."""
    return (1 + index % 5, 1 + (index + 2) % 5, 1 + (index * 3) % 5)


def _campaign_with_workers(*, clips: int = 6, honest: int = 3, **fields):
    campaign = quality_crowd_campaign(
        clips=clips, candidates_per_clip=3, quota=honest + 1, **fields
    )
    items = list(CampaignCandidate.objects.filter(campaign=campaign).order_by("id"))
    workers = [quality_worker(campaign, f"honest-{index}") for index in range(honest)]
    for worker in workers:
        for index, item in enumerate(items):
            quality_judge(worker, item, _values(_honest_pattern(index)), server_ms=15_000)
    return campaign, items


def test_statistics_are_computed_exactly():
    campaign = quality_crowd_campaign(clips=2, candidates_per_clip=2, quota=2)
    items = list(CampaignCandidate.objects.filter(campaign=campaign).order_by("id"))
    first, second = quality_worker(campaign, "first"), quality_worker(campaign, "second")
    # first: 4, 3, 2, 1 on every question; second: the same ordering, one higher.
    for index, item in enumerate(items):
        quality_judge(first, item, _values(4 - index), server_ms=[1000, 2000, 3000, 4000][index])
        quality_judge(second, item, _values(5 - index), server_ms=10_000)

    qc_campaign_full(campaign=campaign)

    stats = WorkerQCStats.objects.get(participation=first)
    assert stats.judgments == 4
    assert stats.median_seconds_per_candidate == pytest.approx(2.5)
    # Campaign median over all 8 timed judgments: (4000 + 10000) / 2 ms = 7 s.
    assert stats.speed_vs_campaign == pytest.approx(2.5 / 7.0, abs=1e-4)
    # Time on clip 1: 1 + 2 = 3 s, clip 2: 3 + 4 = 7 s, clips are 10 s long: median (0.3, 0.7).
    assert stats.speed_vs_clip_length == pytest.approx(0.5)
    # Every clip rated 4,4,4,3,3,3 (clip 1) and 2,2,2,1,1,1 (clip 2): not uniform.
    assert stats.uniform_share == 0.0
    assert stats.rating_variance == pytest.approx(1.25)
    assert stats.control_items == 0 and stats.control_accuracy is None
    # Perfectly ordered like the other worker: correlation 1.
    assert stats.agreement == pytest.approx(1.0)
    assert stats.flags == []  # too few judgments for any rule


def test_a_too_fast_worker_is_excluded_with_the_numbers_and_the_slots_reopen():
    campaign, items = _campaign_with_workers()
    fast = quality_worker(campaign, "fast")
    for index, item in enumerate(items[:9]):
        quality_judge(fast, item, _values(_honest_pattern(index)), server_ms=700)
    slots_before = dict(CampaignCandidate.objects.values_list("id", "slots_taken"))
    open_before = sum(CampaignClip.objects.values_list("open_slots", flat=True))

    summary = qc_campaign_full(campaign=campaign)

    assert summary["excluded"] == [{"worker": "fast", "rules": ["too_fast"]}]
    assert summary["judgments_excluded"] == 9
    fast.refresh_from_db()
    assert fast.status == ParticipationStatus.EXCLUDED
    judgment = Judgment.objects.filter(participation=fast).first()
    assert judgment.is_excluded and judgment.excluded_by == "rule:too_fast"
    assert "0.05× the campaign's 15.0 s" in judgment.exclusion_reason
    assert judgment.exclusion_detail["numbers"]["too_fast"]["speed_vs_campaign"] == pytest.approx(
        0.047, abs=1e-3
    )
    # Nothing deleted; each of the nine candidates got one slot back, and their clips too.
    assert Judgment.objects.filter(participation=fast).count() == 9
    for item in items[:9]:
        assert CampaignCandidate.objects.get(pk=item.pk).slots_taken == slots_before[item.pk] - 1
    assert sum(CampaignClip.objects.values_list("open_slots", flat=True)) == open_before + 9
    exclusion = WorkerExclusion.objects.get(participation=fast)
    assert exclusion.rules == ["too_fast"] and exclusion.judgments_excluded == 9
    audit = AuditEntry.objects.get(action=ReviewAction.EXCLUDE_WORKER)
    assert audit.actor is None and audit.after["judgments_excluded"] == 9
    # Aggregates count kept judgments only.
    assert CampaignCandidate.objects.get(pk=items[0].pk).kept_judgments == 3
    assert all(
        WorkerQCStats.objects.get(participation__worker__external_id=f"honest-{index}").flags == []
        for index in range(3)
    )


def test_too_fast_against_the_clip_length_alone():
    campaign, items = _campaign_with_workers()
    rusher = quality_worker(campaign, "rusher")
    # 1.2 s per candidate is 0.08 of the campaign's typical 15 s, but even one clip of 10 s
    # takes 3.6 s here: the clip-length test fires on its own when the campaign test is off.
    for index, item in enumerate(items[:9]):
        quality_judge(rusher, item, _values(_honest_pattern(index)), server_ms=1200)
    campaign.qc_rules = {"too_fast": {"max_ratio_to_campaign_median": 0}}
    campaign.save()

    summary = qc_campaign_full(campaign=campaign)

    assert summary["excluded"] == [{"worker": "rusher", "rules": ["too_fast"]}]
    flag = WorkerQCStats.objects.get(participation__worker__external_id="rusher").flags[0]
    assert flag["numbers"]["speed_vs_clip_length"] == pytest.approx(0.36)
    assert "0.36× the clip's length" in flag["explanation"]


def test_uniform_ratings_are_excluded():
    campaign, items = _campaign_with_workers()
    flat = quality_worker(campaign, "flat")
    for item in items[:12]:
        quality_judge(flat, item, _values(3), server_ms=15_000)

    summary = qc_campaign_full(campaign=campaign)

    assert summary["excluded"] == [{"worker": "flat", "rules": ["uniform"]}]
    stats = WorkerQCStats.objects.get(participation__worker__external_id="flat")
    assert stats.uniform_share == 1.0 and stats.rating_variance == 0.0
    assert "100% of 4 clips rated with one single value" in stats.flags[0]["explanation"]


def test_low_agreement_is_flagged_until_there_is_enough_evidence_to_exclude():
    campaign, items = _campaign_with_workers()
    contrarian = quality_worker(campaign, "contrarian")
    for index, item in enumerate(items[:12]):
        honest = _honest_pattern(index)
        quality_judge(contrarian, item, _values(tuple(6 - value for value in honest)))

    summary = qc_campaign_full(campaign=campaign)

    # 12 candidates in 4 clips: flagged and listed, not yet excluded (24 candidates are needed).
    assert summary["excluded"] == []
    assert summary["flagged"] == [{"worker": "contrarian", "rules": ["low_agreement"]}]
    stats = WorkerQCStats.objects.get(participation=contrarian)
    assert stats.agreement == pytest.approx(-1.0)
    assert [flag["rule"] for flag in stats.flags] == ["low_agreement"]
    assert stats.flags[0]["action"] == "flag"
    assert "too little evidence yet" in stats.flags[0]["explanation"]
    assert not Judgment.objects.filter(is_excluded=True).exists()

    campaign.qc_rules = {"low_agreement": {"exclude_min_judgments": 12}}
    campaign.save()
    summary = qc_campaign_full(campaign=campaign)
    assert summary["excluded"] == [{"worker": "contrarian", "rules": ["low_agreement"]}]
    assert summary["flagged"] == []


def test_low_agreement_excludes_by_default_with_enough_candidates_and_clips():
    campaign, items = _campaign_with_workers(clips=9)
    contrarian = quality_worker(campaign, "contrarian")
    for index, item in enumerate(items[:24]):  # 24 candidates in 8 clips
        honest = _honest_pattern(index)
        quality_judge(contrarian, item, _values(tuple(6 - value for value in honest)))

    summary = qc_campaign_full(campaign=campaign)

    assert summary["excluded"] == [{"worker": "contrarian", "rules": ["low_agreement"]}]
    flag = WorkerQCStats.objects.get(participation=contrarian).flags[0]
    assert flag["action"] == "exclude"
    assert flag["numbers"]["judgments"] == 24 and flag["numbers"]["clips"] == 8


def _six_caption_clips_with_one_honest_worker():
    """Five clips of six captions, every caption rated by one honest worker at human speed."""
    campaign = quality_crowd_campaign(clips=5, candidates_per_clip=6, quota=2)
    items = list(CampaignCandidate.objects.filter(campaign=campaign).order_by("clip_id", "id"))
    honest = quality_worker(campaign, "honest")
    for index, item in enumerate(items):
        quality_judge(honest, item, _values(_honest_pattern(index)), server_ms=15_000)
    return campaign, items


def test_uniform_rule_waits_for_several_clips_of_equal_ratings():
    # Six good captions on one clip, honestly rated 5 on every question: 18 equal ratings.
    campaign, items = _six_caption_clips_with_one_honest_worker()
    enthusiast = quality_worker(campaign, "enthusiast")
    for item in items[:6]:
        quality_judge(enthusiast, item, _values(5), server_ms=15_000)

    summary = qc_campaign_full(campaign=campaign)

    assert summary["excluded"] == []
    stats = WorkerQCStats.objects.get(participation=enthusiast)
    assert stats.rating_variance == 0.0 and stats.uniform_share == 1.0
    assert stats.flags == []

    # The same on four clips (the rule's min_assignments) is a pattern: excluded.
    for item in items[6:24]:
        quality_judge(enthusiast, item, _values(5), server_ms=15_000)
    summary = qc_campaign_full(campaign=campaign)
    assert summary["excluded"] == [{"worker": "enthusiast", "rules": ["uniform"]}]


def test_too_fast_waits_for_several_clips():
    campaign, items = _six_caption_clips_with_one_honest_worker()
    quick = quality_worker(campaign, "quick")
    for index, item in enumerate(items[:12]):  # two clips, 12 timed judgments
        quality_judge(quick, item, _values(_honest_pattern(index)), server_ms=700)

    assert qc_campaign_full(campaign=campaign)["excluded"] == []
    for index, item in enumerate(items[12:18], start=12):  # a third clip
        quality_judge(quick, item, _values(_honest_pattern(index)), server_ms=700)
    summary = qc_campaign_full(campaign=campaign)
    assert summary["excluded"] == [{"worker": "quick", "rules": ["too_fast"]}]


def test_rules_need_enough_evidence():
    campaign, items = _campaign_with_workers()
    newcomer = quality_worker(campaign, "newcomer")
    for item in items[:3]:  # one clip: too little to judge speed or uniformity
        quality_judge(newcomer, item, _values(3), server_ms=500)

    summary = qc_campaign_full(campaign=campaign)

    assert summary["excluded"] == []
    assert WorkerQCStats.objects.get(participation=newcomer).flags == []


def test_imported_rater_slots_never_trip_identity_or_timing_rules():
    campaign = quality_crowd_campaign(clips=6, candidates_per_clip=3, quota=2, is_imported=True)
    items = list(CampaignCandidate.objects.filter(campaign=campaign))
    slot_a = quality_worker(campaign, "import:slot-1", platform=Platform.IMPORTED)
    slot_b = quality_worker(campaign, "import:slot-2", platform=Platform.IMPORTED)
    for index, item in enumerate(items):
        # Slot 1 is "uniform" and contradicts slot 2 entirely; neither has any timing.
        quality_judge(slot_a, item, _values(3), server_ms=None, source="imported")
        quality_judge(
            slot_b, item, _values(_honest_pattern(index)), server_ms=None, source="imported"
        )

    summary = qc_campaign_full(campaign=campaign)

    assert summary["excluded"] == [] and summary["judgments_excluded"] == 0
    assert set(Participation.objects.values_list("status", flat=True)) == {"active"}
    stats = WorkerQCStats.objects.get(participation=slot_a)
    assert stats.flags == [] and stats.median_seconds_per_candidate is None
    assert stats.rating_variance == 0.0  # shown, but never acted on


def test_rules_configuration_merges_over_defaults_and_is_validated():
    merged = qc_rules_merge({"uniform": {"min_variance": 0.2}, "low_agreement": False})
    assert merged["uniform"]["min_variance"] == 0.2
    assert (
        merged["uniform"]["max_uniform_share"] == DEFAULT_QC_RULES["uniform"]["max_uniform_share"]
    )
    assert merged["low_agreement"]["enabled"] is False
    assert qc_rules_validate({"too_fast": {"action": "exclude"}}) == []
    assert qc_rules_validate(
        {"nope": {}, "uniform": {"colour": 1, "action": "ban", "min_variance": -1}}
    ) == [
        "unknown rule 'nope'",
        "uniform.colour: unknown setting",
        "uniform.action: must be 'exclude' or 'flag'",
        "uniform.min_variance: must be a non-negative number",
    ]


def test_summary_lists_every_excluded_worker_with_rules():
    campaign, items = _campaign_with_workers()
    fast = quality_worker(campaign, "fast")
    for item in items[:9]:
        quality_judge(fast, item, _values(2), server_ms=500)
    qc_campaign_full(campaign=campaign)

    summary = qc_summary(campaign=campaign)

    # Nine equal ratings on three clips: too fast, but not yet a uniform pattern (4 clips).
    assert summary == {
        "workers": 4,
        "excluded": [{"worker": "fast", "rules": ["too_fast"]}],
        "flagged": [],
        "judgments_excluded": 9,
        "review_items": 0,
    }


def test_a_still_image_has_no_length_and_stays_out_of_the_clip_length_ratio():
    """Two 10 s video clips and two still images (no duration, no window): the ratio to the
    clip's length is the median over the videos only; the images still count for the campaign
    ratio."""
    from datasets_app.models import Clip, ClipModality

    campaign = quality_crowd_campaign(clips=4, candidates_per_clip=1, quota=1)
    clips = list(Clip.objects.filter(pk__in=campaign.clips.values("clip_id")).order_by("vatex_id"))
    Clip.objects.filter(pk__in=[clip.pk for clip in clips[2:]]).update(
        modality=ClipModality.IMAGE, youtube_id="", start_seconds=0, end_seconds=0
    )
    items = list(CampaignCandidate.objects.filter(campaign=campaign).order_by("clip__vatex_id"))
    worker = quality_worker(campaign, "mixed")
    for item, server_ms in zip(items, (2000, 4000, 1000, 1000), strict=True):
        quality_judge(worker, item, _values(3), server_ms=server_ms)

    qc_campaign_full(campaign=campaign)

    stats = WorkerQCStats.objects.get(participation=worker)
    assert stats.judgments == 4
    # Videos: 2 s and 4 s of 10 s -> median (0.2, 0.4) = 0.3; the images' 1 s have no length.
    assert stats.speed_vs_clip_length == pytest.approx(0.3)
    assert stats.median_seconds_per_candidate == pytest.approx(1.5)
