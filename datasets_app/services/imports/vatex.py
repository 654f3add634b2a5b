"""Importer of the VATEX annotation JSON: clips and their English references. The VATEX-EVAL file
(clips, candidates and judgments) is imported one layer up, by `annotation.imports.vatex_eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth.models import User

from datasets_app.models import ImportBatch, ImportKind
from datasets_app.services.imports.base import (
    Counts,
    FieldError,
    ImportResult,
    ImportSource,
    ProgressCallback,
    clean_text,
    first_undecodable_path,
    iter_json_array_items,
    parse_vatex_clip_id,
)
from datasets_app.services.imports.batches import import_checked, import_open, import_write_once
from datasets_app.services.imports.writers import (
    ClipSpec,
    dataset_rows_write,
)

MAX_CAPTIONS_PER_CLIP = 100


# --- VATEX annotation JSON ----------------------------------------------------------------------


def vatex_import(
    *,
    path: str | Path,
    limit: int | None = None,
    user: User | None = None,
    progress: ProgressCallback | None = None,
) -> ImportResult:
    """Clips and English references from a VATEX annotation file
    (`[{"videoID": "<youtube id>_<start>_<end>", "enCap": [...], "chCap": [...]}]`)."""
    target = "" if limit is None else f"limit={limit}"
    source, watch, earlier = import_open(
        path=path, kind=ImportKind.VATEX, target=target, limit=limit
    )
    if earlier is not None:
        return earlier

    clips: list[ClipSpec] = []
    seen: dict[str, int] = {}
    complete = True
    for index, entry, offset in iter_json_array_items(source):
        if limit is not None and index >= limit:
            complete = False
            break
        line, column = source.position(offset)
        try:
            spec = _vatex_entry(entry, source=source)
        except FieldError as error:
            raise source.reject(
                f"entry {index}: {error.message}", line=line, column=column, field=error.field
            )
        spec.line, spec.column = line, column
        if spec.clip_id in seen:
            raise source.reject(
                f"the clip {spec.clip_id!r} appears twice (first on line {seen[spec.clip_id]})",
                line=line,
                column=column,
                field="videoID",
            )
        seen[spec.clip_id] = line
        clips.append(spec)
        if progress and len(clips) % 500 == 0:
            progress("validating", len(clips), 0)
    import_checked(source, clips, noun="clips", complete=complete)

    def write(batch: ImportBatch, counts: Counts) -> None:
        dataset_rows_write(
            source=source, batch=batch, clips=clips, candidates=[], counts=counts, progress=progress
        )

    return import_write_once(
        source=source, watch=watch, kind=ImportKind.VATEX, target=target, user=user, write=write
    )


def _vatex_entry(entry: Any, *, source: ImportSource) -> ClipSpec:
    if not isinstance(entry, dict):
        raise FieldError("(entry)", "expected an object with videoID and enCap")
    if source.first_bad_offset is not None:
        bad = first_undecodable_path(entry)
        if bad:
            raise FieldError(bad, "the text is not valid UTF-8")
    for name in ("videoID", "enCap"):
        if name not in entry:
            raise FieldError(name, "the field is missing")
    identity = parse_vatex_clip_id(entry["videoID"], field="videoID")
    captions = entry["enCap"]
    if not isinstance(captions, list) or not captions:
        raise FieldError("enCap", "expected a non-empty list of English captions")
    if len(captions) > MAX_CAPTIONS_PER_CLIP:
        raise FieldError("enCap", f"more than {MAX_CAPTIONS_PER_CLIP} captions")
    references = [clean_text(text, field=f"enCap[{i}]") for i, text in enumerate(captions)]
    return ClipSpec(
        clip_id=identity.vatex_id,
        identity=identity,
        line=None,
        field="videoID",
        references=references,
        reference_field="enCap",
    )
