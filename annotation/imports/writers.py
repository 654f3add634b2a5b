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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from django.db.models import Count, F, Model, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce, Greatest

from annotation.crowd.services.campaign_metric import campaign_metric_score_enqueue
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
from datasets_app.services.imports.writers import (
    CandidateRow,
    candidate_rows_lookup,
    spec_refused,
)

KeyT = TypeVar("KeyT", str, int)


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
    counts: Counts,
    progress: ProgressCallback | None = None,
) -> None:
    """Imported rater identities, their participations, campaign candidates and clips with
    consistent counters, and the judgments themselves (`source=imported`).

    The candidates the judgments name must be stored already (an unknown one refuses the file)."""
    candidates = _judged_candidates(source=source, judgments=judgments)
    rater_pks = _rater_participations(campaign=campaign, judgments=judgments, counts=counts)
    candidate_pks = sorted({candidates[spec.candidate_external_id].pk for spec in judgments})
    items = _pks_by_key(CampaignCandidate, "candidate_id", candidate_pks, campaign=campaign)
    new_specs = _new_judgments(
        source=source,
        campaign=campaign,
        judgments=judgments,
        candidates=candidates,
        rater_pks=rater_pks,
        items=items,
    )
    new_per_candidate: dict[int, int] = defaultdict(int)
    for spec in new_specs:
        new_per_candidate[candidates[spec.candidate_external_id].pk] += 1
    rows_by_pk = {row.pk: row for row in candidates.values()}
    _write_campaign_candidates(
        campaign=campaign,
        candidate_pks=candidate_pks,
        rows_by_pk=rows_by_pk,
        items=items,
        new_per_candidate=new_per_candidate,
        counts=counts,
        progress=progress,
    )
    new_judgments = [
        {
            "campaign_id": campaign.pk,
            "campaign_candidate_id": items[candidates[spec.candidate_external_id].pk],
            "participation_id": rater_pks[spec.worker_external_id],
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


def _rater_participations(
    *, campaign: Campaign, judgments: list[JudgmentSpec], counts: Counts
) -> dict[str, int]:
    """{rater's worker external id: pk of its participation in the campaign}, creating the
    imported workers and participations missing."""
    worker_pks = _rows_ensure(
        Worker,
        key="external_id",
        wanted=sorted({spec.worker_external_id for spec in judgments}),
        counts=counts,
        table="workers",
        platform=Platform.IMPORTED,
    )
    participation_pks = _rows_ensure(
        Participation,
        key="worker_id",
        wanted=sorted(set(worker_pks.values())),
        counts=counts,
        table="participations",
        campaign=campaign,
    )
    return {
        external_id: participation_pks[worker_pk] for external_id, worker_pk in worker_pks.items()
    }


def _judged_candidates(
    *, source: ImportSource, judgments: list[JudgmentSpec]
) -> dict[str, CandidateRow]:
    """{external id: stored row} of the candidates the judgments name; refuses an unknown one."""
    rows = candidate_rows_lookup(external_ids=[spec.candidate_external_id for spec in judgments])
    for spec in judgments:
        if spec.candidate_external_id not in rows:
            raise source.reject(
                f"unknown candidate id {spec.candidate_external_id!r} (import the candidates "
                "first)",
                line=spec.line,
                field="candidate_id",
            )
    return rows


class _StoredJudgment(NamedTuple):
    values: dict[str, int]
    reason: str
    server_ms: int | None


def _new_judgments(
    *,
    source: ImportSource,
    campaign: Campaign,
    judgments: list[JudgmentSpec],
    candidates: dict[str, CandidateRow],
    rater_pks: dict[str, int],
    items: dict[int, int],
) -> list[JudgmentSpec]:
    """The judgments not stored yet; one already stored must be identical, else the file is
    refused. `items`: candidate pk -> pk of its CampaignCandidate in the campaign."""
    stored: dict[tuple[int, int], _StoredJudgment] = {}
    for chunk in chunked(list(items.values())):
        for item_pk, participation_pk, *judgment in Judgment.objects.filter(
            campaign_candidate_id__in=chunk
        ).values_list("campaign_candidate_id", "participation_id", "values", "reason", "server_ms"):
            stored[(item_pk, participation_pk)] = _StoredJudgment(*judgment)
    new_specs: list[JudgmentSpec] = []
    for spec in judgments:
        campaign_item_pk = items.get(candidates[spec.candidate_external_id].pk)
        existing = (
            stored.get((campaign_item_pk, rater_pks[spec.worker_external_id]))
            if campaign_item_pk is not None
            else None
        )
        if existing is None:
            new_specs.append(spec)
        elif existing != (spec.values, spec.reason, spec.server_ms):
            what = (
                "ratings"
                if existing.values != spec.values
                else "reason"
                if existing.reason != spec.reason
                else ("response time")
            )
            raise spec_refused(
                source,
                spec,
                f"the rater {spec.worker_external_id!r} already has a judgment of the candidate "
                f"{spec.candidate_external_id!r} in the campaign {campaign.slug!r} with different "
                f"{what}",
            )
    return new_specs


def _write_campaign_candidates(
    *,
    campaign: Campaign,
    candidate_pks: list[int],
    rows_by_pk: dict[int, CandidateRow],
    items: dict[int, int],
    new_per_candidate: dict[int, int],
    counts: Counts,
    progress: ProgressCallback | None,
) -> None:
    """New campaign candidates start with their imported judgments as taken slots; existing ones
    grow by the judgments added, their quota raised when more judgments than it exist. Adds the
    new ones to `items` (candidate pk -> campaign candidate pk)."""
    quota = campaign.judgments_per_candidate
    new_items: list[dict[str, Any]] = []
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
        new_pks = [item["candidate_id"] for item in new_items]
        items.update(_pks_by_key(CampaignCandidate, "candidate_id", new_pks, campaign=campaign))
        # The campaign's metric scores the new candidates once the import commits.
        campaign_metric_score_enqueue(campaign=campaign)


def _pks_by_key(
    model: type[Model], key: str, keys: Sequence[KeyT], **scope: object
) -> dict[KeyT, int]:
    """{key value: pk} of the stored rows of `model` in `scope` whose `key` is among `keys`."""
    mapping: dict[KeyT, int] = {}
    for chunk in chunked(list(keys)):
        mapping.update(
            model._default_manager.filter(**scope, **{f"{key}__in": chunk}).values_list(key, "pk")
        )
    return mapping


def _rows_ensure(
    model: type[Model],
    *,
    key: str,
    wanted: list[KeyT],
    counts: Counts,
    table: str,
    **scope: object,
) -> dict[KeyT, int]:
    """{key value: pk} of the rows of `model` in `scope` for every value in `wanted`, creating the
    missing ones (counted in `table`)."""
    mapping = _pks_by_key(model, key, wanted, **scope)
    missing = [value for value in wanted if value not in mapping]
    model._default_manager.bulk_create(
        [model(**scope, **{key: value}) for value in missing], batch_size=BULK_BATCH_SIZE
    )
    counts.add(table, created=len(missing), skipped=len(wanted) - len(missing))
    if missing:
        mapping.update(_pks_by_key(model, key, missing, **scope))
    return mapping


def _write_campaign_clips(*, campaign: Campaign, clip_pks: list[int], counts: Counts) -> None:
    """Create the missing CampaignClip rows, then recompute `candidates` and `open_slots` of every
    touched clip from its campaign candidates (sum of quota − slots taken)."""
    existing = _pks_by_key(CampaignClip, "clip_id", clip_pks, campaign=campaign)
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
