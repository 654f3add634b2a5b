"""Database fixtures for `evaluate_metrics`: the VATEX-EVAL campaign built straight from the shipped
file (as `import_vatex_eval` lays it out: campaign `vatex-eval` with the single question `overall`,
rater slots `vatex-eval:slot-1..3` as imported workers, references at positions 0..8 in file order)
and a small crowd campaign with the three default questions."""

from __future__ import annotations

from annotation.models import (
    Campaign,
    CampaignCandidate,
    Judgment,
    JudgmentSource,
    Participation,
    Platform,
    Worker,
)
from annotation.questions import default_questions, overall_only_questions
from datasets_app.models import CandidateCaption, Clip, ReferenceCaption
from tests.metrics.vatex_eval_data import VatexEval

VATEX_EVAL_SLUG = "vatex-eval"


def build_vatex_eval_campaign(data: VatexEval) -> Campaign:
    campaign = Campaign.objects.create(
        slug=VATEX_EVAL_SLUG,
        name="VATEX-EVAL",
        questions=overall_only_questions(),
        overall_question_key="overall",
        judgments_per_candidate=3,
        is_imported=True,
    )
    participations = [
        Participation.objects.create(
            campaign=campaign,
            worker=Worker.objects.create(
                platform=Platform.IMPORTED, external_id=f"vatex-eval:slot-{slot}"
            ),
        )
        for slot in (1, 2, 3)
    ]
    clip_rows: dict[str, Clip] = {}
    for clip_id in data.clip_ids:
        if clip_id in clip_rows:
            continue
        youtube_id, start, end = clip_id.rsplit("_", 2)
        clip_rows[clip_id] = Clip(
            vatex_id=clip_id,
            youtube_id=youtube_id,
            start_seconds=float(int(start)),
            end_seconds=float(int(end)),
        )
    Clip.objects.bulk_create(clip_rows.values())
    clips = {clip.vatex_id: clip for clip in Clip.objects.filter(vatex_id__in=clip_rows)}
    seen: set[str] = set()
    references = []
    for clip_id, group in zip(data.clip_ids, data.references, strict=True):
        if clip_id not in seen:
            seen.add(clip_id)
            references.extend(
                ReferenceCaption(clip=clips[clip_id], position=position, text=text)
                for position, text in enumerate(group)
            )
    ReferenceCaption.objects.bulk_create(references, batch_size=5000)
    candidates = []
    positions: dict[str, int] = {}
    for clip_id, text in zip(data.clip_ids, data.candidates, strict=True):
        position = positions.get(clip_id, 0)
        positions[clip_id] = position + 1
        candidates.append(
            CandidateCaption(
                clip=clips[clip_id],
                external_id=f"vatex-eval:{clip_id}:{position}",
                text=text,
                position=position,
            )
        )
    candidates = CandidateCaption.objects.bulk_create(candidates, batch_size=5000)
    items = CampaignCandidate.objects.bulk_create(
        [
            CampaignCandidate(campaign=campaign, candidate=candidate, clip=candidate.clip, quota=3)
            for candidate in candidates
        ],
        batch_size=5000,
    )
    judgments = [
        Judgment(
            campaign=campaign,
            campaign_candidate=item,
            participation=participations[slot],
            values={"overall": float(data.rater_scores[index, slot])},
            source=JudgmentSource.IMPORTED,
        )
        for index, item in enumerate(items)
        for slot in range(3)
    ]
    Judgment.objects.bulk_create(judgments, batch_size=5000)
    return campaign


def build_crowd_campaign(
    *, slug: str, clips: list[tuple[list[str], list[tuple[str, list[dict[str, int]]]]]]
) -> Campaign:
    """A crowd campaign with the three default questions. `clips` is a list of
    (references, [(candidate text, [judgment values, ...]), ...]); judgment i comes from crowd worker
    i, so every candidate of the campaign can be judged by the same workers or not."""
    campaign = Campaign.objects.create(slug=slug, name=slug, questions=default_questions())
    participations: dict[int, Participation] = {}
    for clip_index, (references, candidates) in enumerate(clips):
        clip = Clip.objects.create(
            vatex_id=f"{slug}clip{clip_index}_000000_000010",
            youtube_id=f"{slug}clip{clip_index}",
            start_seconds=0,
            end_seconds=10,
        )
        for position, text in enumerate(references):
            ReferenceCaption.objects.create(clip=clip, position=position, text=text)
        for position, (text, judgments) in enumerate(candidates):
            candidate = CandidateCaption.objects.create(
                clip=clip,
                external_id=f"{slug}:{clip_index}:{position}",
                text=text,
                position=position,
            )
            item = CampaignCandidate.objects.create(
                campaign=campaign, candidate=candidate, clip=clip, quota=3
            )
            for worker_index, values in enumerate(judgments):
                participation = participations.get(worker_index)
                if participation is None:
                    participation = participations[worker_index] = Participation.objects.create(
                        campaign=campaign,
                        worker=Worker.objects.create(
                            platform=Platform.PROLIFIC, external_id=f"{slug}-worker-{worker_index}"
                        ),
                    )
                Judgment.objects.create(
                    campaign=campaign,
                    campaign_candidate=item,
                    participation=participation,
                    values=values,
                )
    return campaign
