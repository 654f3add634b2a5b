"""Control items: captions whose right rating is known, hidden among the candidates.

Three kinds, made from the campaign's own data:
- `reference`: one of the clip's reference captions shown as a candidate — expected high;
- `other_clip`: a caption of a different clip — expected low relevance (and descriptiveness);
- `shuffled`: a reference of the clip with its words shuffled — expected low fluency.

A control is an ordinary `CandidateCaption` (kind=control) with a `CampaignCandidate`
(is_control=True) in the campaign's clip, so the assignment engine serves it like any candidate
and workers cannot tell it apart. Its `control_spec` says where it came from and the range of
ratings expected per question. Controls never enter a release (export filters `is_control`),
never enter the review queue and never count as finalised.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import F

from annotation.models import Campaign, CampaignCandidate, CampaignClip
from datasets_app.models import CandidateCaption, CandidateKind, ControlType, ReferenceCaption

CONTROL_KINDS: tuple[str, ...] = (
    ControlType.REFERENCE.value,
    ControlType.OTHER_CLIP.value,
    ControlType.SHUFFLED.value,
)

# Expected rating ranges per kind and question (inclusive). Questions not listed have no
# expectation. A campaign overrides them with control_settings = {"expected": {kind: {key: [lo,
# hi]}}}.
DEFAULT_EXPECTED: dict[str, dict[str, list[int]]] = {
    ControlType.REFERENCE.value: {
        "descriptiveness": [3, 5],
        "relevance": [4, 5],
        "fluency": [4, 5],
        "overall": [4, 5],
    },
    ControlType.OTHER_CLIP.value: {
        "descriptiveness": [1, 2],
        "relevance": [1, 2],
        "overall": [1, 2],
    },
    ControlType.SHUFFLED.value: {
        "fluency": [1, 2],
        "overall": [1, 3],
    },
}
MIN_SHUFFLE_WORDS = 4


def expected_for(*, campaign: Campaign, kind: str) -> dict[str, list[int]]:
    configured = (campaign.control_settings or {}).get("expected", {}).get(kind)
    table = configured if isinstance(configured, dict) else DEFAULT_EXPECTED.get(kind, {})
    return {
        key: [int(bounds[0]), int(bounds[1])]
        for key, bounds in table.items()
        if key in campaign.question_keys
    }


def shuffle_words(text: str, generator: random.Random) -> str | None:
    """The words of `text` in a different order (None when too short to tell apart)."""
    words = text.strip().rstrip(".").split()
    if len(words) < MIN_SHUFFLE_WORDS:
        return None
    for _attempt in range(20):
        shuffled = words[:]
        generator.shuffle(shuffled)
        if shuffled != words:
            return " ".join(shuffled)
    return None


def controls_generate(
    *,
    campaign: Campaign,
    rate: float,
    seed: int = 0,
    kinds: Sequence[str] = CONTROL_KINDS,
) -> int:
    """Add control items to `rate` (0..1) of the campaign's clips, one per clip, cycling through
    `kinds`. Deterministic for a given seed; idempotent (clips that already carry a control are
    skipped, and the target share counts them). Returns how many controls were created."""
    if not 0 <= rate <= 1:
        raise ValueError("rate must be between 0 and 1")
    kinds = [kind for kind in kinds if kind in CONTROL_KINDS]
    if not kinds:
        raise ValueError(f"kinds must be among {', '.join(CONTROL_KINDS)}")
    generator = random.Random(seed)
    with transaction.atomic():
        clips = list(
            CampaignClip.objects.select_for_update()
            .filter(campaign=campaign)
            .order_by("id")
            .values_list("id", "clip_id", "clip__vatex_id")
        )
        with_control = set(
            CampaignCandidate.objects.filter(campaign=campaign, is_control=True).values_list(
                "clip_id", flat=True
            )
        )
        wanted = round(rate * len(clips)) - len(with_control)
        if wanted <= 0 or not clips:
            return 0
        free = [clip for clip in clips if clip[1] not in with_control]
        generator.shuffle(free)
        chosen = free[:wanted]
        clip_ids = [clip[1] for clip in clips]
        references, candidate_texts = _clip_texts(campaign=campaign, clip_ids=clip_ids)
        added_per_clip: Counter[int] = Counter()
        kind_order = list(kinds)
        generator.shuffle(kind_order)
        for position, (_row_id, clip_id, vatex_id) in enumerate(chosen):
            for offset in range(len(kind_order)):
                kind = kind_order[(position + offset) % len(kind_order)]
                made = _make_control(
                    kind=kind,
                    clip_id=clip_id,
                    clip_ids=clip_ids,
                    references=references,
                    candidate_texts=candidate_texts,
                    generator=generator,
                )
                if made is None:
                    continue
                _control_create(
                    campaign=campaign, clip_id=clip_id, vatex_id=vatex_id, kind=kind, made=made
                )
                added_per_clip[clip_id] += 1
                break
        created = sum(added_per_clip.values())
        for clip_id, added in added_per_clip.items():
            CampaignClip.objects.filter(campaign=campaign, clip_id=clip_id).update(
                candidates=F("candidates") + added,
                open_slots=F("open_slots") + added * campaign.judgments_per_candidate,
            )
        settings = dict(campaign.control_settings or {})
        settings.update({"kinds": list(kinds), "seed": seed})
        Campaign.objects.filter(pk=campaign.pk).update(control_rate=rate, control_settings=settings)
        campaign.control_rate, campaign.control_settings = rate, settings
    return created


def _clip_texts(
    *, campaign: Campaign, clip_ids: list[int]
) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """References and (non-control) candidate texts per clip, the material of controls."""
    references: dict[int, list[str]] = {}
    for clip_id, text in (
        ReferenceCaption.objects.filter(clip_id__in=clip_ids)
        .order_by("clip_id", "position")
        .values_list("clip_id", "text")
    ):
        references.setdefault(clip_id, []).append(text)
    candidate_texts: dict[int, list[str]] = {}
    for clip_id, text in (
        CampaignCandidate.objects.filter(campaign=campaign, is_control=False)
        .order_by("clip_id", "candidate_id")
        .values_list("clip_id", "candidate__text")
    ):
        candidate_texts.setdefault(clip_id, []).append(text)
    return references, candidate_texts


def _control_create(
    *, campaign: Campaign, clip_id: int, vatex_id: str, kind: str, made: tuple[str, dict[str, Any]]
) -> None:
    text, source = made
    candidate = CandidateCaption.objects.create(
        clip_id=clip_id,
        external_id=f"control:{campaign.slug}:{vatex_id}",
        text=text,
        system=None,
        kind=CandidateKind.CONTROL,
        control_type=kind,
        control_spec={
            "campaign": campaign.slug,
            "source": source,
            "expected": expected_for(campaign=campaign, kind=kind),
        },
    )
    CampaignCandidate.objects.create(
        campaign=campaign,
        candidate=candidate,
        clip_id=clip_id,
        quota=campaign.judgments_per_candidate,
        is_control=True,
    )


def _make_control(
    *,
    kind: str,
    clip_id: int,
    clip_ids: list[int],
    references: dict[int, list[str]],
    candidate_texts: dict[int, list[str]],
    generator: random.Random,
) -> tuple[str, dict[str, Any]] | None:
    own = references.get(clip_id, [])
    if kind == ControlType.REFERENCE:
        if not own:
            return None
        index = generator.randrange(len(own))
        return own[index], {"kind": kind, "reference_position": index}
    if kind == ControlType.SHUFFLED:
        sources = own or candidate_texts.get(clip_id, [])
        order = list(range(len(sources)))
        generator.shuffle(order)
        for index in order:
            shuffled = shuffle_words(sources[index], generator)
            if shuffled:
                return shuffled, {"kind": kind, "shuffled_from": sources[index]}
        return None
    if kind == ControlType.OTHER_CLIP:
        others = [other for other in clip_ids if other != clip_id]
        generator.shuffle(others)
        for other in others[:50]:
            texts = references.get(other) or candidate_texts.get(other) or []
            if texts:
                return generator.choice(texts), {"kind": kind, "from_clip": other}
        return None
    return None
