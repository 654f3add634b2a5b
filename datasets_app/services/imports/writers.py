"""Writing validated import specifications: content-level get-or-create in bulk.

Called inside the import's transaction. Each writer first compares the file's rows with what is
stored (same content: skipped; different content under the same identity: `ImportRejected`, which
rolls the whole file back), then creates the missing rows in bulk: clips, references, candidates,
campaign candidates and judgments with `rows_insert` (COPY on PostgreSQL), raters, participations
and campaign clips with `bulk_create`, so the 54,000 judgments of VATEX-EVAL take seconds, not
minutes.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models import NOT_PROVIDED, Count, F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

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
from datasets_app.models import (
    CandidateCaption,
    CandidateKind,
    CaptioningSystem,
    Clip,
    ImportBatch,
    ReferenceCaption,
)
from datasets_app.services.imports.base import (
    ClipIdentity,
    Counts,
    ImportSource,
    ProgressCallback,
    chunked,
)

BULK_BATCH_SIZE = 2000
_DRIVER_NATIVE_TYPES = {
    "AutoField",
    "BigAutoField",
    "BigIntegerField",
    "BooleanField",
    "CharField",
    "FloatField",
    "IntegerField",
    "PositiveBigIntegerField",
    "PositiveIntegerField",
    "PositiveSmallIntegerField",
    "SlugField",
    "SmallIntegerField",
    "TextField",
}


@dataclass
class ClipSpec:
    """A clip named by a file. `identity` (source id and window) is None when the file only refers
    to the clip by id: it must then exist already."""

    clip_id: str
    identity: ClipIdentity | None
    line: int | None
    field: str
    references: list[str] = dataclasses.field(default_factory=list)
    # Field name of the reference list, for errors: f"{reference_field}[{position}]".
    reference_field: str = "references"
    column: int | None = None
    # Field of each reference for errors when they come from separate rows (CSV): (line, field).
    reference_locations: list[tuple[int | None, str]] | None = None


@dataclass
class CandidateSpec:
    external_id: str
    clip_id: str
    text: str
    system_name: str
    system_version: str
    position: int
    line: int | None
    field: str
    column: int | None = None


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


@dataclass(frozen=True)
class CandidateRow:
    pk: int
    clip_id: int
    is_control: bool


def _report(progress: ProgressCallback | None, stage: str, done: int, total: int) -> None:
    if progress is not None:
        progress(stage, done, total)


def dataset_rows_write(
    *,
    source: ImportSource,
    batch: ImportBatch,
    clips: list[ClipSpec],
    candidates: list[CandidateSpec],
    counts: Counts,
    progress: ProgressCallback | None = None,
) -> dict[str, int]:
    """Clips, references, systems and candidates; returns {vatex id: clip pk} of the file's clips."""
    clip_pks = _write_clips(
        source=source, batch=batch, clips=clips, counts=counts, progress=progress
    )
    _write_references(
        source=source, batch=batch, clips=clips, clip_pks=clip_pks, counts=counts, progress=progress
    )
    system_pks = _write_systems(candidates=candidates, counts=counts)
    _write_candidates(
        source=source,
        batch=batch,
        candidates=candidates,
        clip_pks=clip_pks,
        system_pks=system_pks,
        counts=counts,
        progress=progress,
    )
    return clip_pks


def _write_clips(
    *,
    source: ImportSource,
    batch: ImportBatch,
    clips: list[ClipSpec],
    counts: Counts,
    progress: ProgressCallback | None,
) -> dict[str, int]:
    ids = [spec.clip_id for spec in clips]
    stored: dict[str, tuple[int, str, float, float]] = {}
    for chunk in chunked(ids):
        for pk, vatex_id, youtube_id, start, end in Clip.objects.filter(
            vatex_id__in=chunk
        ).values_list("pk", "vatex_id", "youtube_id", "start_seconds", "end_seconds"):
            stored[vatex_id] = (pk, youtube_id, start, end)
    new: list[dict[str, Any]] = []
    for spec in clips:
        identity = spec.identity
        existing = stored.get(spec.clip_id)
        if existing is None:
            if identity is None:
                raise source.reject(
                    f"unknown clip {spec.clip_id!r}: it is not stored yet and the file gives no "
                    "youtube_id, start and end to create it",
                    line=spec.line,
                    column=spec.column,
                    field=spec.field,
                )
            new.append(
                {
                    "vatex_id": spec.clip_id,
                    "youtube_id": identity.youtube_id,
                    "start_seconds": identity.start_seconds,
                    "end_seconds": identity.end_seconds,
                    "import_batch_id": batch.pk,
                }
            )
            continue
        if identity is None:
            continue
        _, youtube_id, start, end = existing
        if (youtube_id, start, end) != (
            identity.youtube_id,
            identity.start_seconds,
            identity.end_seconds,
        ):
            raise source.reject(
                f"the clip {spec.clip_id!r} is already stored with source {youtube_id!r} "
                f"and window [{start:g}, {end:g}] s; this file says {identity.youtube_id!r} and "
                f"[{identity.start_seconds:g}, {identity.end_seconds:g}] s",
                line=spec.line,
                column=spec.column,
                field=spec.field,
            )
    rows_insert(Clip, new, stage="writing clips", progress=progress)
    counts.add("clips", created=len(new), skipped=len(clips) - len(new))
    mapping = {vatex_id: values[0] for vatex_id, values in stored.items()}
    if new:
        for chunk in chunked([row["vatex_id"] for row in new]):
            mapping.update(Clip.objects.filter(vatex_id__in=chunk).values_list("vatex_id", "pk"))
    return mapping


def _write_references(
    *,
    source: ImportSource,
    batch: ImportBatch,
    clips: list[ClipSpec],
    clip_pks: dict[str, int],
    counts: Counts,
    progress: ProgressCallback | None,
) -> None:
    pks = list({clip_pks[spec.clip_id] for spec in clips})
    stored: dict[tuple[int, int], str] = {}
    for chunk in chunked(pks):
        for clip_id, position, text in ReferenceCaption.objects.filter(
            clip_id__in=chunk
        ).values_list("clip_id", "position", "text"):
            stored[(clip_id, position)] = text
    new: list[dict[str, Any]] = []
    total = 0
    for spec in clips:
        clip_pk = clip_pks[spec.clip_id]
        for position, text in enumerate(spec.references):
            total += 1
            existing = stored.get((clip_pk, position))
            if existing is None:
                new.append(
                    {
                        "clip_id": clip_pk,
                        "position": position,
                        "text": text,
                        "import_batch_id": batch.pk,
                    }
                )
                stored[(clip_pk, position)] = text
            elif existing != text:
                line, column, where = spec.line, spec.column, f"{spec.reference_field}[{position}]"
                if spec.reference_locations is not None:
                    (line, where), column = spec.reference_locations[position], None
                raise source.reject(
                    f"the clip {spec.clip_id!r} already has a different reference at "
                    f"position {position}: {existing[:80]!r}; references are never rewritten "
                    "by an import",
                    line=line,
                    column=column,
                    field=where,
                )
    rows_insert(ReferenceCaption, new, stage="writing references", progress=progress)
    counts.add("references", created=len(new), skipped=total - len(new))


def _write_systems(
    *, candidates: list[CandidateSpec], counts: Counts
) -> dict[tuple[str, str], int]:
    wanted = sorted({(spec.system_name, spec.system_version) for spec in candidates})
    mapping: dict[tuple[str, str], int] = {}
    created = 0
    for name, version in wanted:
        system, was_created = CaptioningSystem.objects.get_or_create(name=name, version=version)
        mapping[(name, version)] = system.pk
        created += int(was_created)
    counts.add("systems", created=created, skipped=len(wanted) - created)
    return mapping


def _write_candidates(
    *,
    source: ImportSource,
    batch: ImportBatch,
    candidates: list[CandidateSpec],
    clip_pks: dict[str, int],
    system_pks: dict[tuple[str, str], int],
    counts: Counts,
    progress: ProgressCallback | None,
) -> None:
    stored: dict[str, tuple[int, str, int | None, str]] = {}
    for chunk in chunked([spec.external_id for spec in candidates]):
        for external_id, clip_id, text, system_id, kind in CandidateCaption.objects.filter(
            external_id__in=chunk
        ).values_list("external_id", "clip_id", "text", "system_id", "kind"):
            stored[external_id] = (clip_id, text, system_id, kind)
    new: list[dict[str, Any]] = []
    for spec in candidates:
        clip_pk = clip_pks[spec.clip_id]
        system_pk = system_pks[(spec.system_name, spec.system_version)]
        existing = stored.get(spec.external_id)
        if existing is None:
            new.append(
                {
                    "clip_id": clip_pk,
                    "external_id": spec.external_id,
                    "text": spec.text,
                    "system_id": system_pk,
                    "kind": CandidateKind.MODEL.value,
                    "position": spec.position,
                    "import_batch_id": batch.pk,
                }
            )
            continue
        stored_clip, stored_text, stored_system, stored_kind = existing
        if (stored_clip, stored_text, stored_system, stored_kind) != (
            clip_pk,
            spec.text,
            system_pk,
            CandidateKind.MODEL,
        ):
            what = (
                "clip"
                if stored_clip != clip_pk
                else "text"
                if stored_text != spec.text
                else "captioning system"
                if stored_system != system_pk
                else "kind"
            )
            raise source.reject(
                f"the candidate id {spec.external_id!r} is already stored with a different "
                f"{what}; give this candidate another id",
                line=spec.line,
                column=spec.column,
                field=spec.field,
            )
    rows_insert(CandidateCaption, new, stage="writing candidates", progress=progress)
    counts.add("candidates", created=len(new), skipped=len(candidates) - len(new))


def candidate_rows_lookup(*, external_ids: list[str]) -> dict[str, CandidateRow]:
    rows: dict[str, CandidateRow] = {}
    for chunk in chunked(sorted(set(external_ids))):
        for external_id, pk, clip_id, kind in CandidateCaption.objects.filter(
            external_id__in=chunk
        ).values_list("external_id", "pk", "clip_id", "kind"):
            rows[external_id] = CandidateRow(pk, clip_id, kind == CandidateKind.CONTROL)
    return rows


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


def _json_text_preparer(model_field: Any) -> Any:
    encoder = model_field.encoder

    def prepare(value: Any, database: Any) -> str:
        return json.dumps(value, cls=encoder)

    return prepare


def rows_insert(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    stage: str,
    progress: ProgressCallback | None,
) -> None:
    """INSERT many rows given as {attname: value} dicts; every other column gets its field default.

    Django's bulk_create builds a model instance per row and prepares every field of every row;
    for the 54,000 judgments of VATEX-EVAL that is most of the import time. Here the defaults are
    prepared once per column and only the given values per row; PostgreSQL loads them with COPY
    (`_rows_copy`), other backends get executemany. COPY fires the same constraints and foreign-key
    triggers as INSERT, so the database still checks every row.
    """
    total = len(rows)
    _report(progress, stage, 0, total)
    if not rows:
        return
    meta = model._meta
    given = list(rows[0])
    fields = [
        model_field
        for model_field in meta.concrete_fields
        if not (
            model_field.primary_key
            and isinstance(model_field, models.AutoField | models.BigAutoField)
        )
        # Generated columns, and columns with a database default that the rows do not give,
        # are left to the database.
        and not getattr(model_field, "generated", False)
        and (
            model_field.attname in given
            or getattr(model_field, "db_default", NOT_PROVIDED) is NOT_PROVIDED
        )
    ]
    known = {model_field.attname for model_field in fields}
    unknown = [name for name in given if name not in known]
    if unknown:
        raise ValueError(f"{meta.label} has no column(s) {unknown}")
    # The real connection object: `django.db.connection` is a proxy with a lookup per access.
    database = connections[DEFAULT_DB_ALIAS]
    now = timezone.now()
    constants: dict[str, Any] = {}
    for model_field in fields:
        if model_field.attname in given:
            continue
        if getattr(model_field, "auto_now", False) or getattr(model_field, "auto_now_add", False):
            default: Any = now
        else:
            default = model_field.get_default()
        constants[model_field.attname] = model_field.get_db_prep_save(default, database)
    # Plain numbers, texts and booleans go to the driver (or COPY's text) as they are; anything
    # else (JSON, dates) through the field's own preparation.
    preparers: dict[str, Any] = {}
    for model_field in fields:
        if model_field.attname not in given:
            continue
        target = getattr(model_field, "target_field", None) if model_field.is_relation else None
        internal = (target or model_field).get_internal_type()
        if internal in _DRIVER_NATIVE_TYPES:
            preparers[model_field.attname] = None
        elif internal == "JSONField":
            # A JSON text, which the column's json/jsonb input parses (INSERT's literal or COPY's
            # field alike).
            preparers[model_field.attname] = _json_text_preparer(model_field)
        else:
            preparers[model_field.attname] = model_field.get_db_prep_save
    quote = database.ops.quote_name
    table = quote(meta.db_table)
    column_names = {model_field.attname: quote(str(model_field.column)) for model_field in fields}
    with database.cursor() as cursor:
        if database.vendor == "postgresql":
            _rows_copy(
                cursor,
                database,
                table=table,
                column_names=column_names,
                preparers=preparers,
                constants=constants,
                rows=rows,
                stage=stage,
                progress=progress,
            )
            return
        order = [model_field.attname for model_field in fields]
        columns = ", ".join(column_names[name] for name in order)
        head = f"INSERT INTO {table} ({columns}) VALUES "
        placeholders = "(" + ", ".join(["%s"] * len(order)) + ")"
        plan = [
            (name, name in preparers, preparers.get(name), constants.get(name)) for name in order
        ]

        def prepared(row: dict[str, Any]) -> tuple[Any, ...]:
            values = []
            for name, is_given, preparer, constant in plan:
                if not is_given:
                    values.append(constant)
                elif preparer is None:
                    values.append(row[name])
                else:
                    values.append(preparer(row[name], database))
            return tuple(values)

        for start in range(0, total, BULK_BATCH_SIZE):
            page = [prepared(row) for row in rows[start : start + BULK_BATCH_SIZE]]
            cursor.executemany(head + placeholders, page)
            _report(progress, stage, min(total, start + BULK_BATCH_SIZE), total)


def _rows_copy(
    cursor: Any,
    database: Any,
    *,
    table: str,
    column_names: dict[str, str],
    preparers: dict[str, Any],
    constants: dict[str, Any],
    rows: list[dict[str, Any]],
    stage: str,
    progress: ProgressCallback | None,
) -> None:
    """Load the rows with `COPY ... FROM STDIN` (text format), one page of BULK_BATCH_SIZE rows per
    statement, the given columns first and the defaults after them.

    Each default is turned into its text once, by the database itself (`%s::text` of the value as
    psycopg2 adapts it for INSERT), so it reads back exactly as an INSERT would have stored it; the
    given values are turned into text per row by `_copy_text`. COPY fires the same constraints and
    foreign-key triggers as INSERT; Django's foreign keys stay deferred to the commit (checking them
    during the COPY with SET CONSTRAINTS ... IMMEDIATE was measured, and is no faster).
    """
    given = list(preparers)
    defaults = list(constants)
    default_texts: list[str] = []
    if defaults:
        cursor.execute(
            "SELECT " + ", ".join(["%s::text"] * len(defaults)),
            [constants[name] for name in defaults],
        )
        default_texts = [_copy_text(text) for text in cursor.fetchone()]
    tail = ("\t" if given and defaults else "") + "\t".join(default_texts) + "\n"
    columns = ", ".join(column_names[name] for name in given + defaults)
    statement = f"COPY {table} ({columns}) FROM STDIN"
    plan = [(name, preparers[name]) for name in given]
    total = len(rows)
    for start in range(0, total, BULK_BATCH_SIZE):
        page = io.StringIO()
        write = page.write
        for row in rows[start : start + BULK_BATCH_SIZE]:
            write(
                "\t".join(
                    [
                        _copy_text(row[name] if preparer is None else preparer(row[name], database))
                        for name, preparer in plan
                    ]
                )
            )
            write(tail)
        page.seek(0)
        # Django's own exception classes (IntegrityError, ...), as for the statements it runs.
        with database.wrap_database_errors:
            cursor.copy_expert(statement, page)
        _report(progress, stage, min(total, start + BULK_BATCH_SIZE), total)


def _copy_text(value: Any) -> str:
    """One value as a field of COPY's text format: NULL is \\N; backslash, tab, newline and
    carriage return are escaped with a backslash; everything else is written as it is."""
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return (
            value.replace("\\", "\\\\")
            .replace("\t", "\\t")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, int | float | Decimal | UUID):
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    raise TypeError(f"no COPY text for a value of type {type(value).__name__}")
