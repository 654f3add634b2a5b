"""The generic candidates format (docs/import-formats.md): clips, references and candidate captions
as JSON Lines or CSV, so any source comes in without code. Judgments in the generic format are
imported one layer up, by `annotation.imports.judgments`."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User

from datasets_app.models import ImportBatch, ImportKind
from datasets_app.services.imports.base import (
    CLIP_ID_PATTERN,
    EXTERNAL_ID_PATTERN,
    SOURCE_ID_PATTERN,
    VATEX_ID_PATTERN,
    ClipIdentity,
    Counts,
    FieldError,
    ImportResult,
    ImportSource,
    ProgressCallback,
    clean_identifier,
    clean_optional_text,
    clean_seconds,
    clean_text,
    detect_tabular_format,
    iter_csv_rows,
    iter_jsonl_objects,
    parse_vatex_clip_id,
)
from datasets_app.services.imports.batches import import_checked, import_open, import_write_once
from datasets_app.services.imports.writers import (
    CandidateSpec,
    ClipSpec,
    dataset_rows_write,
)

CANDIDATE_LINE_KEYS = {"clip_id", "youtube_id", "start", "end", "references", "candidates"}
CANDIDATE_ITEM_KEYS = {"text", "system", "system_version", "id"}
CANDIDATE_CSV_COLUMNS = [
    "clip_id",
    "role",
    "text",
    "system",
    "system_version",
    "candidate_id",
    "youtube_id",
    "start",
    "end",
]
MAX_ITEMS_PER_CLIP = 200


def derived_candidate_id(*, clip_id: str, system: str, version: str, text: str) -> str:
    """The id of a candidate given without one: stable for the same clip, system and text."""
    digest = hashlib.sha256(f"{system}\n{version}\n{text}".encode()).hexdigest()[:16]
    return f"{clip_id}:{digest}"


# --- Clips --------------------------------------------------------------------------------------


def _clip_identity(row: dict[str, Any]) -> tuple[str, ClipIdentity | None]:
    """The clip id and, when known, its source id and window: from a VATEX-shaped id, or from the
    explicit youtube_id/start/end (which must agree with a VATEX-shaped id when both are given)."""
    clip_id = clean_identifier(
        row.get("clip_id"), field="clip_id", pattern=CLIP_ID_PATTERN, what="clip id"
    )
    derived = (
        parse_vatex_clip_id(clip_id, field="clip_id") if VATEX_ID_PATTERN.match(clip_id) else None
    )
    given = {
        name: row.get(name)
        for name in ("youtube_id", "start", "end")
        if row.get(name) is not None
        and not (isinstance(row.get(name), str) and not row[name].strip())
    }
    if not given:
        return clip_id, derived
    youtube_id = (
        clean_identifier(
            given["youtube_id"], field="youtube_id", pattern=SOURCE_ID_PATTERN, what="YouTube id"
        )
        if "youtube_id" in given
        else None
    )
    start = clean_seconds(given["start"], field="start") if "start" in given else None
    end = clean_seconds(given["end"], field="end") if "end" in given else None
    if derived is not None:
        for name, value, expected in (
            ("youtube_id", youtube_id, derived.youtube_id),
            ("start", start, derived.start_seconds),
            ("end", end, derived.end_seconds),
        ):
            if value is not None and value != expected:
                raise FieldError(name, f"{value!r} differs from the clip id {clip_id!r}")
        return clip_id, derived
    for name, value in (("youtube_id", youtube_id), ("start", start), ("end", end)):
        if value is None:
            raise FieldError(
                name, "youtube_id, start and end go together for a clip id that is not a VATEX id"
            )
    assert youtube_id is not None and start is not None and end is not None
    if end <= start:
        raise FieldError("end", f"the end ({end:g} s) is not after the start ({start:g} s)")
    return clip_id, ClipIdentity(clip_id, youtube_id, start, end)


def _candidate_fields(
    item: dict[str, Any],
    *,
    clip_id: str,
    id_field: str,
    text_field: str,
    system_field: str,
    version_field: str,
) -> tuple[str, str, str, str, str]:
    """(external id, text, system, version, field naming the id) of one candidate."""
    text = clean_text(item.get("text"), field=text_field)
    if item.get("system") in (None, ""):
        raise FieldError(system_field, "the captioning system is required for a candidate")
    system = clean_text(item.get("system"), field=system_field, max_chars=200)
    version = clean_optional_text(item.get("system_version"), field=version_field, max_chars=100)
    raw_id = item.get("id")
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        external_id = derived_candidate_id(
            clip_id=clip_id, system=system, version=version, text=text
        )
        return external_id, text, system, version, text_field
    external_id = clean_identifier(
        raw_id, field=id_field, pattern=EXTERNAL_ID_PATTERN, what="candidate id"
    )
    return external_id, text, system, version, id_field


def _candidate_spec(
    fields: tuple[str, str, str, str, str], *, clip_id: str, position: int, line: int
) -> CandidateSpec:
    """One candidate from `_candidate_fields`' answer; the JSON and CSV readers differ only in
    where its position comes from."""
    external_id, text, system, version, where = fields
    return CandidateSpec(
        external_id=external_id,
        clip_id=clip_id,
        text=text,
        system_name=system,
        system_version=version,
        position=position,
        line=line,
        field=where,
    )


# --- Candidates ---------------------------------------------------------------------------------


def candidates_import(
    *,
    path: str | Path,
    file_format: str | None = None,
    user: User | None = None,
    progress: ProgressCallback | None = None,
) -> ImportResult:
    """Clips, references and candidates (with their captioning system) from a JSONL or CSV file."""
    source, watch, earlier = import_open(path=path, kind=ImportKind.CANDIDATES)
    if earlier is not None:
        return earlier
    if detect_tabular_format(source, file_format) == "jsonl":
        clips, candidates = _candidates_from_jsonl(source, progress)
    else:
        clips, candidates = _candidates_from_csv(source, progress)
    import_checked(source, clips, noun="rows")
    _refuse_duplicate_candidate_ids(source, candidates)

    def write(batch: ImportBatch, counts: Counts) -> None:
        dataset_rows_write(
            source=source,
            batch=batch,
            clips=clips,
            candidates=candidates,
            counts=counts,
            progress=progress,
        )

    return import_write_once(
        source=source, watch=watch, kind=ImportKind.CANDIDATES, target="", user=user, write=write
    )


def _candidates_from_jsonl(
    source: ImportSource, progress: ProgressCallback | None
) -> tuple[list[ClipSpec], list[CandidateSpec]]:
    clips: list[ClipSpec] = []
    candidates: list[CandidateSpec] = []
    seen: dict[str, int] = {}
    for line, row in iter_jsonl_objects(source):
        try:
            unknown = sorted(set(row) - CANDIDATE_LINE_KEYS)
            if unknown:
                raise FieldError(unknown[0], "unknown field (see docs/import-formats.md)")
            clip_id, identity = _clip_identity(row)
            references_raw = row.get("references", [])
            if not isinstance(references_raw, list):
                raise FieldError("references", "expected a list of reference captions")
            if len(references_raw) > MAX_ITEMS_PER_CLIP:
                raise FieldError("references", f"more than {MAX_ITEMS_PER_CLIP} references")
            references = [
                clean_text(text, field=f"references[{index}]")
                for index, text in enumerate(references_raw)
            ]
            items = row.get("candidates", [])
            if not isinstance(items, list):
                raise FieldError("candidates", "expected a list of candidate objects")
            if len(items) > MAX_ITEMS_PER_CLIP:
                raise FieldError("candidates", f"more than {MAX_ITEMS_PER_CLIP} candidates")
            clip_candidates: list[CandidateSpec] = []
            for index, item in enumerate(items):
                prefix = f"candidates[{index}]"
                if not isinstance(item, dict):
                    raise FieldError(prefix, "expected an object with text and system")
                unknown = sorted(set(item) - CANDIDATE_ITEM_KEYS)
                if unknown:
                    raise FieldError(f"{prefix}.{unknown[0]}", "unknown field")
                fields = _candidate_fields(
                    item,
                    clip_id=clip_id,
                    id_field=f"{prefix}.id",
                    text_field=f"{prefix}.text",
                    system_field=f"{prefix}.system",
                    version_field=f"{prefix}.system_version",
                )
                clip_candidates.append(
                    _candidate_spec(fields, clip_id=clip_id, position=index, line=line)
                )
        except FieldError as error:
            raise source.reject(error.message, line=line, field=error.field)
        if clip_id in seen:
            raise source.reject(
                f"the clip {clip_id!r} appears twice (first on line {seen[clip_id]}); put all of "
                "a clip's references and candidates on one line",
                line=line,
                field="clip_id",
            )
        seen[clip_id] = line
        clips.append(
            ClipSpec(
                clip_id=clip_id,
                identity=identity,
                line=line,
                field="clip_id",
                references=references,
            )
        )
        candidates.extend(clip_candidates)
        if progress and len(clips) % 500 == 0:
            progress("validating", len(clips), 0)
    return clips, candidates


def _candidates_from_csv(
    source: ImportSource, progress: ProgressCallback | None
) -> tuple[list[ClipSpec], list[CandidateSpec]]:
    clips: dict[str, ClipSpec] = {}
    candidates: list[CandidateSpec] = []
    positions: dict[str, int] = defaultdict(int)

    def check_header(columns: list[str]) -> None:
        unknown = [name for name in columns if name not in CANDIDATE_CSV_COLUMNS]
        if unknown:
            raise source.reject(
                "unknown column (see docs/import-formats.md)", line=1, field=unknown[0]
            )

    for line, row in iter_csv_rows(
        source, required=["clip_id", "role", "text"], check_header=check_header
    ):
        try:
            clip_id, identity = _clip_identity(row)
            role = row["role"].strip()
            if role == "reference":
                for name in ("system", "system_version", "candidate_id"):
                    if row.get(name, "").strip():
                        raise FieldError(name, "must be empty on a reference row")
                text = clean_text(row["text"], field="text")
            elif role == "candidate":
                fields = _candidate_fields(
                    {
                        "text": row["text"],
                        "system": row.get("system", ""),
                        "system_version": row.get("system_version", ""),
                        "id": row.get("candidate_id", ""),
                    },
                    clip_id=clip_id,
                    id_field="candidate_id",
                    text_field="text",
                    system_field="system",
                    version_field="system_version",
                )
            else:
                raise FieldError("role", f"{role!r} is not a role (use reference or candidate)")
        except FieldError as error:
            raise source.reject(error.message, line=line, field=error.field)
        spec = _csv_clip(source, clips, clip_id=clip_id, identity=identity, line=line)
        if role == "reference":
            spec.references.append(text)
            assert spec.reference_locations is not None
            spec.reference_locations.append((line, "text"))
            if len(spec.references) > MAX_ITEMS_PER_CLIP:
                raise source.reject(
                    f"more than {MAX_ITEMS_PER_CLIP} references", line=line, field="text"
                )
        else:
            candidates.append(
                _candidate_spec(fields, clip_id=clip_id, position=positions[clip_id], line=line)
            )
            positions[clip_id] += 1
        if progress and line % 1000 == 0:
            progress("validating", line, 0)
    return list(clips.values()), candidates


def _csv_clip(
    source: ImportSource,
    clips: dict[str, ClipSpec],
    *,
    clip_id: str,
    identity: ClipIdentity | None,
    line: int,
) -> ClipSpec:
    """The clip of a CSV row: made on its first row; a row that names its YouTube window must
    agree with the one an earlier row gave."""
    spec = clips.get(clip_id)
    if spec is None:
        spec = clips[clip_id] = ClipSpec(
            clip_id=clip_id,
            identity=identity,
            line=line,
            field="clip_id",
            references=[],
            reference_field="text",
            reference_locations=[],
        )
    elif identity is not None:
        if spec.identity is None:
            spec.identity = identity
        elif spec.identity != identity:
            raise source.reject(
                f"the clip {clip_id!r} has another youtube_id/start/end on line {spec.line}",
                line=line,
                field="youtube_id",
            )
    return spec


def _refuse_duplicate_candidate_ids(source: ImportSource, candidates: list[CandidateSpec]) -> None:
    first: dict[str, CandidateSpec] = {}
    for spec in candidates:
        earlier = first.get(spec.external_id)
        if earlier is None:
            first[spec.external_id] = spec
            continue
        if spec.field.endswith("text"):  # both ids were derived from clip, system and text
            message = (
                f"the same candidate (clip, system and text) appears twice (first on line "
                f"{earlier.line}); give each one an explicit id if both are wanted"
            )
        else:
            message = f"the candidate id {spec.external_id!r} appears twice (first on line {earlier.line})"
        raise source.reject(message, line=spec.line, field=spec.field)
