"""Builders for the quality-control tests: a VATEX-EVAL campaign from the shipped file, small
crowd campaigns, and judgments with chosen ratings and timings."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from django.db import connection
from django.utils import timezone

from annotation.models import (
    AgreementSnapshot,
    Assignment,
    AssignmentItem,
    AuditEntry,
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    JudgmentSource,
    Participation,
    Platform,
    QCRun,
    ReviewItem,
    Worker,
    WorkerExclusion,
    WorkerQCStats,
)
from annotation.questions import default_questions
from datasets_app.models import (
    CandidateCaption,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ImportKind,
    ReferenceCaption,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
VATEX_EVAL_FILE = REPO_ROOT / "data" / "vatex_eval" / "vid_cans_score_dict.json"


def vatex_eval_rows() -> list[tuple[str, list[str], list[list[int]], list[str]]]:
    """(clip id, candidates, ratings per candidate (3 slots), references) from the file."""
    data = json.loads(VATEX_EVAL_FILE.read_text(encoding="utf-8"))
    rows = []
    for clip_id, value in data.items():
        scores = [[int(score) for score in row] for row in ast.literal_eval(value["scores"])]
        rows.append((clip_id, list(value["cands"]), scores, list(value["refs"][0])))
    return rows


def quality_import_vatex_eval() -> Campaign:
    """The real VATEX-EVAL import (ingest's `vatex_eval_import`) of the shipped file: the campaign
    `vatex-eval` with the single `overall` question, quota 3, three imported rater slots."""
    from annotation.imports import vatex_eval_import

    result = vatex_eval_import(path=VATEX_EVAL_FILE)
    with connection.cursor() as cursor:
        for model in (Clip, CandidateCaption, CampaignCandidate, CampaignClip, Judgment):
            cursor.execute(f"ANALYZE {model._meta.db_table}")
    return Campaign.objects.get(slug=result.campaign)


def quality_delete_vatex_eval(*, slug: str = "vatex-eval") -> None:
    """Remove the campaign and its data with plain DELETEs (no per-row cascade collection)."""
    campaign = Campaign.objects.filter(slug=slug).first()
    if campaign is None:
        return
    clip_ids = list(campaign.clips.values_list("clip_id", flat=True))
    worker_ids = list(
        Worker.objects.filter(participations__campaign=campaign).values_list("id", flat=True)
    )
    for queryset in (
        AuditEntry.objects.filter(campaign=campaign),
        ReviewItem.objects.filter(campaign=campaign),
        Judgment.objects.filter(campaign=campaign),
        AssignmentItem.objects.filter(assignment__campaign=campaign),
        Assignment.objects.filter(campaign=campaign),
        WorkerQCStats.objects.filter(participation__campaign=campaign),
        WorkerExclusion.objects.filter(participation__campaign=campaign),
        Participation.objects.filter(campaign=campaign),
        AgreementSnapshot.objects.filter(campaign=campaign),
        QCRun.objects.filter(campaign=campaign),
        CampaignCandidate.objects.filter(campaign=campaign),
        CampaignClip.objects.filter(campaign=campaign),
        Campaign.objects.filter(pk=campaign.pk),
        ReferenceCaption.objects.filter(clip_id__in=clip_ids),
        CandidateCaption.objects.filter(clip_id__in=clip_ids),
        Clip.objects.filter(id__in=clip_ids),
        Worker.objects.filter(id__in=worker_ids),
        ImportBatch.objects.filter(kind=ImportKind.VATEX_EVAL),
        CaptioningSystem.objects.filter(candidates__isnull=True),
    ):
        queryset._raw_delete(queryset.db)


# ----------------------------------------------------------------------------------------------
# Small crowd campaigns
# ----------------------------------------------------------------------------------------------


def quality_crowd_campaign(
    *,
    slug: str = "crowd",
    clips: int = 4,
    candidates_per_clip: int = 3,
    quota: int = 3,
    questions: list[dict[str, Any]] | None = None,
    qc_rules: dict[str, Any] | None = None,
    systems: tuple[str, ...] = ("system-a", "system-b", "system-c"),
    references_per_clip: int = 2,
    **fields: Any,
) -> Campaign:
    """A crowd campaign with clips of 10 s, references, candidates of a few systems, and the
    counters the assignment engine keeps (open_slots = candidates × quota)."""
    campaign = Campaign.objects.create(
        slug=slug,
        name=f"Campaign {slug}",
        questions=questions if questions is not None else default_questions(),
        judgments_per_candidate=quota,
        qc_rules=qc_rules or {},
        **fields,
    )
    system_rows = [
        CaptioningSystem.objects.get_or_create(name=name, version="1")[0] for name in systems
    ]
    for clip_index in range(clips):
        clip = Clip.objects.create(
            vatex_id=f"{slug}-clip{clip_index:04d}_000010_000020",
            youtube_id=f"{slug}-clip{clip_index:04d}",
            start_seconds=10,
            end_seconds=20,
        )
        for position in range(references_per_clip):
            ReferenceCaption.objects.create(
                clip=clip,
                position=position,
                text=f"reference {position} of clip {clip_index}: a person plays a red guitar on "
                f"a small stage",
            )
        CampaignClip.objects.create(
            campaign=campaign,
            clip=clip,
            candidates=candidates_per_clip,
            open_slots=candidates_per_clip * quota,
        )
        for index in range(candidates_per_clip):
            candidate = CandidateCaption.objects.create(
                clip=clip,
                external_id=f"{slug}:{clip_index}:{index}",
                text=f"candidate {index} for clip {clip_index}: someone plays music",
                system=system_rows[index % len(system_rows)],
                position=index,
            )
            CampaignCandidate.objects.create(
                campaign=campaign, candidate=candidate, clip=clip, quota=quota
            )
    return campaign


def quality_worker(
    campaign: Campaign, external_id: str, *, platform: str = Platform.PROLIFIC
) -> Participation:
    worker, _ = Worker.objects.get_or_create(platform=platform, external_id=external_id)
    return Participation.objects.create(
        campaign=campaign, worker=worker, consented_at=timezone.now()
    )


def quality_judge(
    participation: Participation,
    item: CampaignCandidate,
    values: dict[str, int],
    *,
    server_ms: int | None = 20_000,
    source: str = JudgmentSource.CROWD,
    take_slot: bool = True,
) -> Judgment:
    """A finished judgment, with the slot counters moved as the engine would."""
    from django.db.models import F

    judgment = Judgment.objects.create(
        campaign=item.campaign,
        campaign_candidate=item,
        participation=participation,
        values=values,
        server_ms=server_ms,
        source=source,
    )
    if take_slot:
        CampaignCandidate.objects.filter(pk=item.pk).update(slots_taken=F("slots_taken") + 1)
        CampaignClip.objects.filter(campaign=item.campaign, clip=item.clip).update(
            open_slots=F("open_slots") - 1
        )
    return judgment


def quality_slots_consistent(campaign: Campaign) -> None:
    """open_slots = Σ(quota − slots_taken) on every clip; slots never above quota."""
    for clip in CampaignClip.objects.filter(campaign=campaign):
        rows = CampaignCandidate.objects.filter(campaign=campaign, clip=clip.clip)
        assert clip.open_slots == sum(row.quota - row.slots_taken for row in rows)
        assert all(0 <= row.slots_taken <= row.quota for row in rows)
