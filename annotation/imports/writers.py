"""Writing the judgments of an import: imported raters, their participations, campaign candidates
and clips with consistent counters, and the judgments themselves.

Called inside the import's transaction, after `datasets_app`'s writers have stored the clips and
candidates the judgments refer to. A judgment already stored must be identical (else
`ImportRejected` rolls the whole file back); new judgments and campaign candidates go in with
`common.bulk.rows_insert` (COPY on PostgreSQL), raters, participations and campaign clips with
`bulk_create`, so the 54,000 judgments of VATEX-EVAL take seconds, not minutes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce, Greatest

from annotation.models import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    JudgmentSource,
    Participation,
    Platform,
    Worker,
)
from common.bulk import BULK_BATCH_SIZE, rows_insert
from datasets_app.models import ImportBatch
from datasets_app.services.imports.base import Counts, ImportSource, ProgressCallback, chunked
from datasets_app.services.imports.writers import CandidateRow


@dataclass
class JudgmentSpec:
    candidate_external_id: str
    worker_external_id: str
    values: dict[str, int]
    line: int | None
    field: str
    server_ms: int | None = None
    reason: str = ""
    column: int | None = None


def judgment_rows_write(
    *,
    source: ImportSource,
    batch: ImportBatch,
    campaign: Campaign,
    judgments: list[JudgmentSpec],
    candidates: dict[str, CandidateRow],
    counts: Counts,
    progress: ProgressCallback | None = None,
) -> None:
    """Imported rater identities, their participations, campaign candidates and clips with
    consistent counters, and the judgments themselves (`source=imported`)."""
    worker_pks = _write_workers(judgments=judgments, counts=counts)
    participation_pks = _write_participations(
        campaign=campaign, worker_pks=worker_pks, counts=counts
    )

    candidate_pks = sorted({candidates[spec.candidate_external_id].pk for spec in judgments})
    # candidate pk -> pk of its CampaignCandidate in this campaign
    items: dict[int, int] = {}
    for chunk in chunked(candidate_pks):
        items.update(
            CampaignCandidate.objects.filter(campaign=campaign, candidate_id__in=chunk).values_list(
                "candidate_id", "pk"
            )
        )
    stored: dict[tuple[int, int], tuple[dict[str, Any], str, int | None]] = {}
    item_pks = list(items.values())
    for chunk in chunked(item_pks):
        for item_pk, participation_pk, values, reason, server_ms in Judgment.objects.filter(
            campaign_candidate_id__in=chunk
        ).values_list("campaign_candidate_id", "participation_id", "values", "reason", "server_ms"):
            stored[(item_pk, participation_pk)] = (values, reason, server_ms)

    # Which judgments are new, per candidate (a judgment already stored must be identical).
    new_specs: list[JudgmentSpec] = []
    new_per_candidate: dict[int, int] = defaultdict(int)
    for spec in judgments:
        candidate = candidates[spec.candidate_external_id]
        participation_pk = participation_pks[worker_pks[spec.worker_external_id]]
        campaign_item_pk = items.get(candidate.pk)
        existing = (
            stored.get((campaign_item_pk, participation_pk))
            if campaign_item_pk is not None
            else None
        )
        if existing is None:
            new_specs.append(spec)
            new_per_candidate[candidate.pk] += 1
            continue
        values, reason, server_ms = existing
        if (values, reason, server_ms) != (spec.values, spec.reason, spec.server_ms):
            what = (
                "ratings"
                if values != spec.values
                else "reason"
                if reason != spec.reason
                else ("response time")
            )
            raise source.reject(
                f"the rater {spec.worker_external_id!r} already has a judgment of the candidate "
                f"{spec.candidate_external_id!r} in the campaign {campaign.slug!r} with different "
                f"{what}",
                line=spec.line,
                column=spec.column,
                field=spec.field,
            )

    # Campaign candidates: new ones start with their imported judgments as taken slots; existing
    # ones grow by the judgments added, their quota raised when more judgments than it exist.
    quota = campaign.judgments_per_candidate
    new_items: list[dict[str, Any]] = []
    rows_by_pk = {row.pk: row for row in candidates.values()}
    for candidate_pk in candidate_pks:
        if candidate_pk in items:
            continue
        added = new_per_candidate[candidate_pk]
        candidate_row = rows_by_pk[candidate_pk]
        new_items.append(
            {
                "campaign_id": campaign.pk,
                "candidate_id": candidate_pk,
                "clip_id": candidate_row.clip_id,
                "quota": max(quota, added),
                "slots_taken": added,
                "is_control": candidate_row.is_control,
            }
        )
    rows_insert(
        CampaignCandidate, new_items, stage="writing campaign candidates", progress=progress
    )
    counts.add(
        "campaign_candidates", created=len(new_items), skipped=len(candidate_pks) - len(new_items)
    )
    grown: dict[int, list[int]] = defaultdict(list)
    for candidate_pk, item_pk in items.items():
        if new_per_candidate.get(candidate_pk):
            grown[new_per_candidate[candidate_pk]].append(item_pk)
    for added, pks in grown.items():
        for chunk in chunked(pks):
            CampaignCandidate.objects.filter(pk__in=chunk).update(
                slots_taken=F("slots_taken") + added,
                quota=Greatest(F("quota"), F("slots_taken") + added),
            )
    if new_items:
        for chunk in chunked([item["candidate_id"] for item in new_items]):
            items.update(
                CampaignCandidate.objects.filter(
                    campaign=campaign, candidate_id__in=chunk
                ).values_list("candidate_id", "pk")
            )

    new_judgments = [
        {
            "campaign_id": campaign.pk,
            "campaign_candidate_id": items[candidates[spec.candidate_external_id].pk],
            "participation_id": participation_pks[worker_pks[spec.worker_external_id]],
            "values": spec.values,
            "reason": spec.reason,
            "source": JudgmentSource.IMPORTED.value,
            "server_ms": spec.server_ms,
            "import_batch_id": batch.pk,
        }
        for spec in new_specs
    ]
    rows_insert(Judgment, new_judgments, stage="writing judgments", progress=progress)
    counts.add("judgments", created=len(new_judgments), skipped=len(judgments) - len(new_judgments))

    touched_clips = sorted({rows_by_pk[pk].clip_id for pk in candidate_pks})
    _write_campaign_clips(campaign=campaign, clip_pks=touched_clips, counts=counts)


def _write_workers(*, judgments: list[JudgmentSpec], counts: Counts) -> dict[str, int]:
    wanted = sorted({spec.worker_external_id for spec in judgments})
    mapping: dict[str, int] = {}
    for chunk in chunked(wanted):
        mapping.update(
            Worker.objects.filter(platform=Platform.IMPORTED, external_id__in=chunk).values_list(
                "external_id", "pk"
            )
        )
    missing = [
        Worker(platform=Platform.IMPORTED, external_id=external_id)
        for external_id in wanted
        if external_id not in mapping
    ]
    Worker.objects.bulk_create(missing, batch_size=BULK_BATCH_SIZE)
    counts.add("workers", created=len(missing), skipped=len(wanted) - len(missing))
    if missing:
        for chunk in chunked([worker.external_id for worker in missing]):
            mapping.update(
                Worker.objects.filter(
                    platform=Platform.IMPORTED, external_id__in=chunk
                ).values_list("external_id", "pk")
            )
    return mapping


def _write_participations(
    *, campaign: Campaign, worker_pks: dict[str, int], counts: Counts
) -> dict[int, int]:
    wanted = sorted(set(worker_pks.values()))
    mapping: dict[int, int] = {}
    for chunk in chunked(wanted):
        mapping.update(
            Participation.objects.filter(campaign=campaign, worker_id__in=chunk).values_list(
                "worker_id", "pk"
            )
        )
    missing = [
        Participation(campaign=campaign, worker_id=worker_pk)
        for worker_pk in wanted
        if worker_pk not in mapping
    ]
    Participation.objects.bulk_create(missing, batch_size=BULK_BATCH_SIZE)
    counts.add("participations", created=len(missing), skipped=len(wanted) - len(missing))
    if missing:
        for chunk in chunked([participation.worker_id for participation in missing]):
            mapping.update(
                Participation.objects.filter(campaign=campaign, worker_id__in=chunk).values_list(
                    "worker_id", "pk"
                )
            )
    return mapping


def _write_campaign_clips(*, campaign: Campaign, clip_pks: list[int], counts: Counts) -> None:
    """Create the missing CampaignClip rows, then recompute `candidates` and `open_slots` of every
    touched clip from its campaign candidates (sum of quota − slots taken)."""
    existing: set[int] = set()
    for chunk in chunked(clip_pks):
        existing.update(
            CampaignClip.objects.filter(campaign=campaign, clip_id__in=chunk).values_list(
                "clip_id", flat=True
            )
        )
    missing = [
        CampaignClip(campaign=campaign, clip_id=clip_pk)
        for clip_pk in clip_pks
        if clip_pk not in existing
    ]
    CampaignClip.objects.bulk_create(missing, batch_size=BULK_BATCH_SIZE)
    counts.add("campaign_clips", created=len(missing), skipped=len(clip_pks) - len(missing))
    per_clip = (
        CampaignCandidate.objects.filter(campaign=campaign, clip_id=OuterRef("clip_id"))
        .order_by()
        .values("clip_id")
    )
    for chunk in chunked(clip_pks):
        CampaignClip.objects.filter(campaign=campaign, clip_id__in=chunk).update(
            candidates=Coalesce(Subquery(per_clip.annotate(n=Count("pk")).values("n")), 0),
            open_slots=Coalesce(
                Subquery(per_clip.annotate(open=Sum(F("quota") - F("slots_taken"))).values("open")),
                0,
            ),
        )
