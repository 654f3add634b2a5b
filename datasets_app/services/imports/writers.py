"""Writing validated import specifications of the data layer: content-level get-or-create in bulk.

Called inside the import's transaction. Each writer first compares the file's rows with what is
stored (same content: skipped; different content under the same identity: `ImportRejected`, which
rolls the whole file back), then creates the missing clips, references and candidates in bulk with
`common.bulk.rows_insert` (COPY on PostgreSQL). The judgments of a file are written one layer up,
by `annotation.imports.writers`, which reuses these.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from common.bulk import rows_insert
from datasets_app.models import (
    CandidateCaption,
    CandidateKind,
    CaptioningSystem,
    Clip,
    ClipModality,
    ImportBatch,
    ReferenceCaption,
)
from datasets_app.services.imports.base import (
    ClipIdentity,
    Counts,
    ImportRejected,
    ImportSource,
    ProgressCallback,
    chunked,
)


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
    # "image" for a still image (`identity` then has no YouTube id and the window (0, 0)).
    modality: str = ClipModality.VIDEO.value


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


class _Placed(Protocol):
    line: int | None
    column: int | None
    field: str


def spec_refused(source: ImportSource, spec: _Placed, message: str) -> ImportRejected:
    """The file refused at the place a row was read from (its line, column and field)."""
    return source.reject(message, line=spec.line, column=spec.column, field=spec.field)


@dataclass(frozen=True)
class CandidateRow:
    pk: int
    clip_id: int
    is_control: bool


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
    job = _RowsWrite(source=source, batch=batch, counts=counts, progress=progress)
    clip_pks = _write_clips(job, clips=clips)
    _write_references(job, clips=clips, clip_pks=clip_pks)
    system_pks = _write_systems(candidates=candidates, counts=counts)
    _write_candidates(job, candidates=candidates, clip_pks=clip_pks, system_pks=system_pks)
    return clip_pks


@dataclass(frozen=True)
class _RowsWrite:
    """What each table's writer of one import needs besides its rows."""

    source: ImportSource
    batch: ImportBatch
    counts: Counts
    progress: ProgressCallback | None


def _write_clips(job: _RowsWrite, *, clips: list[ClipSpec]) -> dict[str, int]:
    source, batch, counts, progress = job.source, job.batch, job.counts, job.progress
    ids = [spec.clip_id for spec in clips]
    stored: dict[str, tuple[int, str, float, float, str]] = {}
    for chunk in chunked(ids):
        for pk, vatex_id, youtube_id, start, end, modality in Clip.objects.filter(
            vatex_id__in=chunk
        ).values_list("pk", "vatex_id", "youtube_id", "start_seconds", "end_seconds", "modality"):
            stored[vatex_id] = (pk, youtube_id, start, end, modality)
    new: list[dict[str, Any]] = []
    for spec in clips:
        identity = spec.identity
        existing = stored.get(spec.clip_id)
        if existing is None:
            if identity is None:
                raise spec_refused(
                    source,
                    spec,
                    f"unknown clip {spec.clip_id!r}: it is not stored yet and the file gives no "
                    "youtube_id, start and end to create it",
                )
            new.append(
                {
                    "vatex_id": spec.clip_id,
                    "modality": spec.modality,
                    "youtube_id": identity.youtube_id,
                    "start_seconds": identity.start_seconds,
                    "end_seconds": identity.end_seconds,
                    "import_batch_id": batch.pk,
                }
            )
            continue
        if identity is None:
            continue
        _, youtube_id, start, end, modality = existing
        if modality != spec.modality:
            raise spec_refused(
                source,
                spec,
                f"the id {spec.clip_id!r} is already stored as a {modality} clip; this file "
                f"gives a {spec.modality} under the same id",
            )
        if (youtube_id, start, end) != (
            identity.youtube_id,
            identity.start_seconds,
            identity.end_seconds,
        ):
            raise spec_refused(
                source,
                spec,
                f"the clip {spec.clip_id!r} is already stored with source {youtube_id!r} "
                f"and window [{start:g}, {end:g}] s; this file says {identity.youtube_id!r} and "
                f"[{identity.start_seconds:g}, {identity.end_seconds:g}] s",
            )
    rows_insert(Clip, new, stage="writing clips", progress=progress)
    counts.add("clips", created=len(new), skipped=len(clips) - len(new))
    mapping = {vatex_id: values[0] for vatex_id, values in stored.items()}
    if new:
        for chunk in chunked([row["vatex_id"] for row in new]):
            mapping.update(Clip.objects.filter(vatex_id__in=chunk).values_list("vatex_id", "pk"))
    return mapping


def _write_references(job: _RowsWrite, *, clips: list[ClipSpec], clip_pks: dict[str, int]) -> None:
    source, batch, counts, progress = job.source, job.batch, job.counts, job.progress
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
    job: _RowsWrite,
    *,
    candidates: list[CandidateSpec],
    clip_pks: dict[str, int],
    system_pks: dict[tuple[str, str], int],
) -> None:
    source, batch, counts, progress = job.source, job.batch, job.counts, job.progress
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
            raise spec_refused(
                source,
                spec,
                f"the candidate id {spec.external_id!r} is already stored with a different "
                f"{what}; give this candidate another id",
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
