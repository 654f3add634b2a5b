"""Builders for the crowd-flow tests: clips with (fake or real) videos, campaigns made by the real
`campaign_create` service, workers that join through the real service."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from annotation.crowd.services.campaigns import campaign_create
from annotation.crowd.services.workers import worker_join
from annotation.models import Campaign, Participation
from datasets_app.models import CandidateCaption, Clip, ClipStatus
from tests.factories import CandidateFactory, ClipFactory, ReferenceFactory, SystemFactory


def ready_clip(*, video_key: str | None = None, references: int = 2, **fields: Any) -> Clip:
    """A clip whose video is ready (the key need not exist in storage unless a browser plays it)."""
    clip = ClipFactory.build(**fields)
    clip.status = ClipStatus.READY
    clip.duration = 1.5
    clip.video_key = video_key or f"clips/{clip.vatex_id}.mp4"
    clip.poster_key = f"posters/{clip.vatex_id}.jpg"
    clip.processed_at = timezone.now()
    clip.save()
    for index in range(references):
        ReferenceFactory(clip=clip, position=index, text=f"reference {index} of {clip.vatex_id}")
    return clip


def clips_with_candidates(
    *,
    clips: int,
    candidates_per_clip: int = 3,
    ready: bool = True,
    system: str = "test-captioner",
) -> list[Clip]:
    made = []
    captioner = SystemFactory(name=system, version="1.0")
    for _ in range(clips):
        clip = ready_clip() if ready else ClipFactory(status=ClipStatus.PENDING)
        for position in range(candidates_per_clip):
            CandidateFactory(clip=clip, system=captioner, position=position)
        made.append(clip)
    return made


def crowd_campaign(
    *,
    clips: int = 3,
    candidates_per_clip: int = 3,
    judgments_per_candidate: int = 3,
    slug: str = "pilot",
    **options: Any,
) -> Campaign:
    """A campaign over freshly made ready clips (and only those)."""
    made = clips_with_candidates(clips=clips, candidates_per_clip=candidates_per_clip)
    return campaign_create(
        slug=slug,
        name=f"Campaign {slug}",
        judgments_per_candidate=judgments_per_candidate,
        clip_vatex_ids=[clip.vatex_id for clip in made],
        **options,
    )


def crowd_join(
    campaign: Campaign, external_id: str, **identifiers: str
) -> tuple[str, Participation]:
    """A Prolific worker joined through the real service: (worker token, participation)."""
    joined = worker_join(
        campaign=campaign,
        platform="prolific",
        external_id=external_id,
        identifiers={"study_id": "study-1", "session_id": f"session-{external_id}", **identifiers},
    )
    participation = Participation.objects.select_related("campaign", "worker").get(
        pk=joined.participation.pk
    )
    return joined.worker_token, participation


def all_candidate_ratings(
    payload: dict[str, Any], value: int = 4, **extra: Any
) -> list[dict[str, Any]]:
    """A rating of every candidate of a `next` payload, `value` on every question."""
    keys = [question["key"] for question in payload["questions"]]
    return [
        {"candidate_id": candidate["id"], **{key: value for key in keys}, **extra}
        for candidate in payload["candidates"]
    ]


def candidate_texts(campaign: Campaign) -> dict[int, str]:
    return dict(
        CandidateCaption.objects.filter(campaign_items__campaign=campaign).values_list(
            "campaign_items__id", "text"
        )
    )
