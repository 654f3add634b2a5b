"""Campaign data for release tests, built fast with bulk_create.

Aggregates are written the way `annotation.quality.aggregation` defines them (mean of the kept
judgments per question, overall = mean of the question means, normalised (overall - 1) / 4, class
= overall rounded half up, finalised when kept >= quota and no review is pending), so the release
reads realistic rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from annotation.models import (
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    ParticipationStatus,
    Platform,
    ReviewState,
    Worker,
    WorkerExclusion,
)
from annotation.questions import default_questions
from datasets_app.models import (
    CandidateCaption,
    CandidateKind,
    CaptioningSystem,
    Clip,
    ControlType,
    ReferenceCaption,
)

WORDS = tuple(
    [
        "a",
        "man",
        "woman",
        "child",
        "dog",
        "cat",
        "plays",
        "guitar",
        "piano",
        "runs",
        "jumps",
        "into",
        "the",
        "pool",
        "kitchen",
        "cooks",
        "food",
        "street",
        "rides",
        "bicycle",
        "slowly",
        "quickly",
        "red",
        "blue",
        "ball",
        "throws",
        "catches",
        "team",
        "field",
        "stage",
        "dances",
        "while",
        "people",
        "watch",
        "outside",
        "inside",
        "table",
        "paints",
        "wall",
    ]
)


@dataclass
class CampaignData:
    campaign: Campaign
    clips: list[Clip] = field(default_factory=list)
    items: list[CampaignCandidate] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    participations: list[Participation] = field(default_factory=list)


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def aggregate(values: list[dict[str, int]], keys: list[str]) -> tuple[dict[str, float], float]:
    means = {key: sum(value[key] for value in values) / len(values) for key in keys}
    overall = sum(means[key] for key in keys) / len(keys)
    return means, overall


def build_campaign(
    *,
    slug: str,
    clips: int = 12,
    candidates_per_clip: tuple[int, int] = (2, 5),
    quota: int = 3,
    workers: int = 6,
    seed: int = 7,
    controls: int = 1,
    dropped: int = 1,
    below_quota: int = 1,
    under_review: int = 1,
    resolved: int = 1,
    excluded_worker: bool = True,
    system_prefix: str = "captioner",
    clip_prefix: str = "",
) -> CampaignData:
    rng = random.Random(seed)
    campaign = Campaign.objects.create(
        slug=slug,
        name=f"Campaign {slug}",
        questions=default_questions(),
        judgments_per_candidate=quota,
        qc_rules={"too_fast": {"enabled": True, "min_seconds": 2}},
    )
    keys = campaign.question_keys
    data = CampaignData(campaign=campaign)
    systems = [
        CaptioningSystem.objects.get_or_create(name=f"{system_prefix}-{index}", version="1.0")[0]
        for index in range(3)
    ]
    data.workers = [
        Worker.objects.get_or_create(platform=Platform.PROLIFIC, external_id=f"{slug}-worker-{i}")[
            0
        ]
        for i in range(workers)
    ]
    data.participations = [
        Participation.objects.create(campaign=campaign, worker=worker) for worker in data.workers
    ]
    data.clips = Clip.objects.bulk_create(
        Clip(
            vatex_id=f"{clip_prefix}{slug}clip{index:03d}_{index:06d}_{index + 10:06d}",
            youtube_id=f"{clip_prefix}{slug}clip{index:03d}",
            start_seconds=float(index),
            end_seconds=float(index + 10),
            video_key=f"clips/{slug}/{index}.mp4" if index % 2 else "",
            frames_key=f"frames/{slug}/{index}" if index % 2 else "",
            duration=9.5 if index % 3 == 0 else None,
        )
        for index in range(clips)
    )
    ReferenceCaption.objects.bulk_create(
        ReferenceCaption(clip=clip, position=position, text=_sentence(rng, 5, 12))
        for clip in data.clips
        for position in range(rng.randint(1, 4))
    )
    candidates = []
    for clip in data.clips:
        for position in range(rng.randint(*candidates_per_clip)):
            candidates.append(
                CandidateCaption(
                    clip=clip,
                    external_id=f"{slug}:{clip.vatex_id}:{position}",
                    text=_sentence(rng, 4, 14).capitalize() + ".",
                    system=rng.choice(systems),
                    position=position,
                )
            )
    for index in range(controls):
        clip = data.clips[index]
        candidates.append(
            CandidateCaption(
                clip=clip,
                external_id=f"{slug}:control:{index}",
                text="a control caption",
                kind=CandidateKind.CONTROL,
                control_type=ControlType.REFERENCE,
            )
        )
    candidates = CandidateCaption.objects.bulk_create(candidates)
    judgments = []
    items = []
    special = candidates[: -controls or None]
    roles = (
        ["dropped"] * dropped
        + ["below_quota"] * below_quota
        + ["under_review"] * under_review
        + ["resolved"] * resolved
    )
    role_of = {candidate.pk: role for candidate, role in zip(special[1::3], roles, strict=False)}
    for candidate in candidates:
        is_control = candidate.kind == CandidateKind.CONTROL
        role = "control" if is_control else role_of.get(candidate.pk, "normal")
        raters = rng.sample(data.participations, quota)
        if role == "below_quota":
            raters = raters[: quota - 1]
        values = []
        for _rater in raters:
            base = rng.randint(1, 5)
            values.append({key: min(5, max(1, base + rng.choice((-1, 0, 0, 1)))) for key in keys})
        item = CampaignCandidate(
            campaign=campaign,
            candidate=candidate,
            clip_id=candidate.clip_id,
            quota=quota,
            slots_taken=len(raters),
            is_control=is_control,
            judgments_total=len(raters),
            kept_judgments=len(raters),
            dropped=role == "dropped",
        )
        means, overall = aggregate(values, keys)
        if role == "resolved":
            means = {key: 4.0 for key in keys}
            overall = 4.0
            item.review_state = ReviewState.RESOLVED
            item.resolution = {"values": means}
        item.means = means
        item.overall = overall
        item.normalized = (overall - 1) / 4
        item.training_class = int(overall + 0.5)
        item.rating_range = max(
            max(value[key] for value in values) - min(value[key] for value in values)
            for key in keys
        )
        if role == "under_review":
            item.review_state = ReviewState.OPEN
        item.is_finalised = role in ("normal", "resolved", "dropped", "control")
        items.append(item)
        judgments.append((item, raters, values))
    data.items = CampaignCandidate.objects.bulk_create(items)
    Judgment.objects.bulk_create(
        Judgment(
            campaign=campaign,
            campaign_candidate=item,
            participation=participation,
            values=value,
            reason="looks wrong" if value[keys[0]] <= 2 else "",
        )
        for item, raters, values in judgments
        for participation, value in zip(raters, values, strict=True)
    )
    if excluded_worker:
        _exclude_one_worker(data)
    return data


def _exclude_one_worker(data: CampaignData) -> None:
    """Exclude the last worker: mark their judgments excluded and re-aggregate what they rated."""
    participation = data.participations[-1]
    participation.status = ParticipationStatus.EXCLUDED
    participation.save(update_fields=["status"])
    WorkerExclusion.objects.create(
        participation=participation,
        rules=["too_fast", "uniform"],
        judgments_excluded=participation.judgments.count(),
    )
    touched = set(participation.judgments.values_list("campaign_candidate_id", flat=True))
    participation.judgments.update(
        is_excluded=True, excluded_by="rule:too_fast", exclusion_reason="median 1.2 s per candidate"
    )
    keys = data.campaign.question_keys
    for item in CampaignCandidate.objects.filter(pk__in=touched):
        kept = list(item.judgments.filter(is_excluded=False).values_list("values", flat=True))
        item.kept_judgments = len(kept)
        # The aggregation's range of the kept ratings (what a fixed campaign's stop reason reads).
        item.rating_range = max(
            (max(value[key] for value in kept) - min(value[key] for value in kept) for key in keys),
            default=None,
        )
        if item.review_state != ReviewState.RESOLVED and kept:
            item.means, item.overall = aggregate(kept, keys)
            item.normalized = (item.overall - 1) / 4
            item.training_class = int(item.overall + 0.5)
        item.is_finalised = (
            (item.review_state == ReviewState.RESOLVED or len(kept) >= item.quota)
            and item.review_state != ReviewState.OPEN
            and bool(kept or item.resolution)
        )
        item.save()
