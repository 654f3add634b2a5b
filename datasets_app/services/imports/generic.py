"""The generic import formats (docs/import-formats.md): candidates and judgments as JSON Lines or
CSV, so any source comes in without code."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from annotation.models import Campaign, CampaignStatus
from annotation.questions import level_values, with_levels
from datasets_app.models import ImportKind
from datasets_app.services.imports.base import (
    CAMPAIGN_SLUG_PATTERN,
    CLIP_ID_PATTERN,
    EXTERNAL_ID_PATTERN,
    QUESTION_KEY_PATTERN,
    RATER_ID_PATTERN,
    SOURCE_ID_PATTERN,
    VATEX_ID_PATTERN,
    ClipIdentity,
    Counts,
    FieldError,
    ImportRejected,
    ImportResult,
    ImportSource,
    ProgressCallback,
    Stopwatch,
    clean_identifier,
    clean_milliseconds,
    clean_optional_text,
    clean_rating,
    clean_seconds,
    clean_text,
    detect_tabular_format,
    import_source_read,
    iter_csv_rows,
    iter_jsonl_objects,
    lock_imports,
    parse_vatex_clip_id,
)
from datasets_app.services.imports.batches import (
    create_batch,
    existing_batch,
    finish_batch,
    result_for_existing_batch,
)
from datasets_app.services.imports.writers import (
    CandidateSpec,
    ClipSpec,
    JudgmentSpec,
    candidate_rows_lookup,
    dataset_rows_write,
    judgment_rows_write,
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
JUDGMENT_LINE_KEYS = {"rater_id", "candidate_id", "values", "response_time_ms", "reason"}
JUDGMENT_CSV_FIXED = ["rater_id", "candidate_id", "response_time_ms", "reason"]
DEFAULT_LEVELS = [1, 2, 3, 4, 5]
MAX_ITEMS_PER_CLIP = 200


def derived_candidate_id(*, clip_id: str, system: str, version: str, text: str) -> str:
    """The id of a candidate given without one: stable for the same clip, system and text."""
    digest = hashlib.sha256(f"{system}\n{version}\n{text}".encode()).hexdigest()[:16]
    return f"{clip_id}:{digest}"


def judgment_worker_external_id(*, campaign_slug: str, rater_id: str) -> str:
    """Imported raters are namespaced by campaign: "r1" of two sources are not merged."""
    return f"{campaign_slug}:{rater_id}"


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


# --- Candidates ---------------------------------------------------------------------------------


def candidates_import(
    *,
    path: str | Path,
    file_format: str | None = None,
    user: User | None = None,
    progress: ProgressCallback | None = None,
) -> ImportResult:
    """Clips, references and candidates (with their captioning system) from a JSONL or CSV file."""
    watch = Stopwatch()
    source = import_source_read(path=path)
    kind = detect_tabular_format(source, file_format)
    existing = existing_batch(kind=ImportKind.CANDIDATES, sha256=source.sha256, target="")
    if existing is not None:
        return result_for_existing_batch(existing, source, watch)
    if kind == "jsonl":
        clips, candidates = _candidates_from_jsonl(source, progress)
    else:
        clips, candidates = _candidates_from_csv(source, progress)
    source.check_fully_decoded()
    if not clips:
        raise source.reject("the file holds no rows")
    _refuse_duplicate_candidate_ids(source, candidates)

    with transaction.atomic():
        lock_imports()
        existing = existing_batch(kind=ImportKind.CANDIDATES, sha256=source.sha256, target="")
        if existing is not None:
            return result_for_existing_batch(existing, source, watch)
        batch = create_batch(source=source, kind=ImportKind.CANDIDATES, target="", user=user)
        counts = Counts()
        dataset_rows_write(
            source=source,
            batch=batch,
            clips=clips,
            candidates=candidates,
            counts=counts,
            progress=progress,
        )
        finish_batch(batch, counts)
    return ImportResult(
        kind=ImportKind.CANDIDATES,
        file=source.name,
        sha256=source.sha256,
        batch_id=batch.pk,
        already_imported=False,
        created=counts.created,
        skipped=counts.skipped,
        seconds=watch.seconds,
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
                external_id, text, system, version, where = _candidate_fields(
                    item,
                    clip_id=clip_id,
                    id_field=f"{prefix}.id",
                    text_field=f"{prefix}.text",
                    system_field=f"{prefix}.system",
                    version_field=f"{prefix}.system_version",
                )
                clip_candidates.append(
                    CandidateSpec(
                        external_id=external_id,
                        clip_id=clip_id,
                        text=text,
                        system_name=system,
                        system_version=version,
                        position=index,
                        line=line,
                        field=where,
                    )
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
                external_id, text, system, version, where = _candidate_fields(
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
                CandidateSpec(
                    external_id=external_id,
                    clip_id=clip_id,
                    text=text,
                    system_name=system,
                    system_version=version,
                    position=positions[clip_id],
                    line=line,
                    field=where,
                )
            )
            positions[clip_id] += 1
        if progress and line % 1000 == 0:
            progress("validating", line, 0)
    return list(clips.values()), candidates


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


# --- Judgments ----------------------------------------------------------------------------------


def judgments_import(
    *,
    path: str | Path,
    campaign_slug: str,
    file_format: str | None = None,
    user: User | None = None,
    progress: ProgressCallback | None = None,
) -> ImportResult:
    """Judgments (rater, candidate, one value per rating question, optional response time and
    reason) into the campaign `campaign_slug`, as imported judgments. A campaign that does not
    exist is created as an imported campaign whose questions are the file's value columns, 1–5."""
    watch = Stopwatch()
    if not isinstance(campaign_slug, str) or not CAMPAIGN_SLUG_PATTERN.match(campaign_slug):
        raise ImportRejected(
            file=str(path),
            message=f"{campaign_slug!r} is not a campaign slug (lowercase letters, digits, - and _)",
        )
    source = import_source_read(path=path)
    kind = detect_tabular_format(source, file_format)
    existing = existing_batch(kind=ImportKind.JUDGMENTS, sha256=source.sha256, target=campaign_slug)
    if existing is not None:
        return result_for_existing_batch(existing, source, watch, campaign=campaign_slug)

    campaign = Campaign.objects.filter(slug=campaign_slug).first()
    levels = _campaign_levels(campaign) if campaign is not None else None
    if kind == "jsonl":
        judgments, keys = _judgments_from_jsonl(source, levels, campaign_slug, progress)
    else:
        judgments, keys = _judgments_from_csv(source, levels, campaign_slug, progress)
    source.check_fully_decoded()
    if not judgments:
        raise source.reject("the file holds no judgments")

    with transaction.atomic():
        lock_imports()
        existing = existing_batch(
            kind=ImportKind.JUDGMENTS, sha256=source.sha256, target=campaign_slug
        )
        if existing is not None:
            return result_for_existing_batch(existing, source, watch, campaign=campaign_slug)
        counts = Counts()
        campaign, created = _judgments_campaign(
            source=source, slug=campaign_slug, keys=keys, judgments=judgments, user=user
        )
        counts.add("campaigns", created=int(created), skipped=int(not created))
        batch = create_batch(
            source=source, kind=ImportKind.JUDGMENTS, target=campaign_slug, user=user
        )
        rows = candidate_rows_lookup(
            external_ids=[spec.candidate_external_id for spec in judgments]
        )
        for spec in judgments:
            if spec.candidate_external_id not in rows:
                raise source.reject(
                    f"unknown candidate id {spec.candidate_external_id!r} (import the candidates "
                    "first)",
                    line=spec.line,
                    field="candidate_id",
                )
        judgment_rows_write(
            source=source,
            batch=batch,
            campaign=campaign,
            judgments=judgments,
            candidates=rows,
            counts=counts,
            progress=progress,
        )
        finish_batch(batch, counts)
    return ImportResult(
        kind=ImportKind.JUDGMENTS,
        file=source.name,
        sha256=source.sha256,
        batch_id=batch.pk,
        already_imported=False,
        created=counts.created,
        skipped=counts.skipped,
        campaign=campaign.slug,
        campaign_created=created,
        seconds=watch.seconds,
    )


def _campaign_levels(campaign: Campaign) -> dict[str, list[int]]:
    return {question["key"]: level_values(question) for question in campaign.questions}


def _judgment_spec(
    *,
    raw_values: dict[str, Any],
    rater: Any,
    candidate: Any,
    response_time: Any,
    reason: Any,
    levels: dict[str, list[int]] | None,
    keys: list[str] | None,
    campaign_slug: str,
    value_field: str,
) -> tuple[JudgmentSpec, list[str]]:
    """One judgment; `keys` are the questions fixed so far (by the campaign or the first row)."""
    rater_id = clean_identifier(rater, field="rater_id", pattern=RATER_ID_PATTERN, what="rater id")
    candidate_id = clean_identifier(
        candidate, field="candidate_id", pattern=EXTERNAL_ID_PATTERN, what="candidate id"
    )
    expected = list(levels) if levels is not None else keys
    if expected is None:
        if not raw_values:
            raise FieldError(value_field, "no rating values")
        for key in raw_values:
            if not isinstance(key, str) or not QUESTION_KEY_PATTERN.match(key):
                raise FieldError(
                    f"{value_field}{key}",
                    "a question name is lowercase letters, digits and _ (at most 50), starting "
                    "with a letter",
                )
        expected = list(raw_values)
    unknown = [key for key in raw_values if key not in expected]
    if unknown:
        raise FieldError(
            f"{value_field}{unknown[0]}",
            f"unknown question; the campaign's questions are {', '.join(expected)}",
        )
    values: dict[str, int] = {}
    for key in expected:
        if (
            key not in raw_values
            or raw_values[key] is None
            or (isinstance(raw_values[key], str) and not raw_values[key].strip())
        ):
            raise FieldError(f"{value_field}{key}", "the rating is missing")
        allowed = levels[key] if levels is not None else DEFAULT_LEVELS
        values[key] = clean_rating(raw_values[key], field=f"{value_field}{key}", allowed=allowed)
    spec = JudgmentSpec(
        candidate_external_id=candidate_id,
        worker_external_id=judgment_worker_external_id(
            campaign_slug=campaign_slug, rater_id=rater_id
        ),
        values=values,
        line=None,
        field="rater_id",
        server_ms=clean_milliseconds(response_time, field="response_time_ms"),
        reason=clean_optional_text(
            reason, field="reason", max_chars=settings.LEPUS_MAX_REASON_CHARS
        ),
    )
    return spec, expected


def _judgments_from_jsonl(
    source: ImportSource,
    levels: dict[str, list[int]] | None,
    campaign_slug: str,
    progress: ProgressCallback | None,
) -> tuple[list[JudgmentSpec], list[str]]:
    judgments: list[JudgmentSpec] = []
    keys: list[str] | None = None
    seen: dict[tuple[str, str], int] = {}
    for line, row in iter_jsonl_objects(source):
        try:
            unknown = sorted(set(row) - JUDGMENT_LINE_KEYS)
            if unknown:
                raise FieldError(unknown[0], "unknown field (see docs/import-formats.md)")
            for name in ("rater_id", "candidate_id", "values"):
                if name not in row:
                    raise FieldError(name, "the field is missing")
            if not isinstance(row["values"], dict):
                raise FieldError("values", "expected an object {question: rating}")
            spec, keys = _judgment_spec(
                raw_values=row["values"],
                rater=row["rater_id"],
                candidate=row["candidate_id"],
                response_time=row.get("response_time_ms"),
                reason=row.get("reason"),
                levels=levels,
                keys=keys,
                campaign_slug=campaign_slug,
                value_field="values.",
            )
        except FieldError as error:
            raise source.reject(error.message, line=line, field=error.field)
        _remember(source, seen, spec, line)
        spec.line = line
        judgments.append(spec)
        if progress and len(judgments) % 5000 == 0:
            progress("validating", len(judgments), 0)
    return judgments, keys or []


def _judgments_from_csv(
    source: ImportSource,
    levels: dict[str, list[int]] | None,
    campaign_slug: str,
    progress: ProgressCallback | None,
) -> tuple[list[JudgmentSpec], list[str]]:
    judgments: list[JudgmentSpec] = []
    keys: list[str] | None = None
    seen: dict[tuple[str, str], int] = {}

    def check_header(columns: list[str]) -> None:
        nonlocal keys
        questions = [name for name in columns if name not in JUDGMENT_CSV_FIXED]
        if not questions:
            raise source.reject("no rating columns: add one column per question", line=1)
        for name in questions:
            if not QUESTION_KEY_PATTERN.match(name):
                raise source.reject(
                    "a question column is lowercase letters, digits and _, starting with a letter",
                    line=1,
                    field=name,
                )
        if levels is not None:
            for name in questions:
                if name not in levels:
                    raise source.reject(
                        f"unknown question; the campaign's questions are {', '.join(levels)}",
                        line=1,
                        field=name,
                    )
            for name in levels:
                if name not in questions:
                    raise source.reject("the campaign's question has no column", line=1, field=name)
        keys = questions

    for line, row in iter_csv_rows(
        source, required=["rater_id", "candidate_id"], check_header=check_header
    ):
        assert keys is not None
        try:
            spec, _ = _judgment_spec(
                raw_values={name: row[name] for name in keys},
                rater=row["rater_id"],
                candidate=row["candidate_id"],
                response_time=row.get("response_time_ms"),
                reason=row.get("reason"),
                levels=levels,
                keys=keys,
                campaign_slug=campaign_slug,
                value_field="",
            )
        except FieldError as error:
            raise source.reject(error.message, line=line, field=error.field)
        _remember(source, seen, spec, line)
        spec.line = line
        judgments.append(spec)
        if progress and len(judgments) % 5000 == 0:
            progress("validating", len(judgments), 0)
    if levels is not None and keys is not None:
        keys = list(levels)
    return judgments, keys or []


def _remember(
    source: ImportSource, seen: dict[tuple[str, str], int], spec: JudgmentSpec, line: int
) -> None:
    key = (spec.candidate_external_id, spec.worker_external_id)
    if key in seen:
        raise source.reject(
            f"duplicate rater for a candidate: this rater already judged the candidate "
            f"{spec.candidate_external_id!r} on line {seen[key]}",
            line=line,
            field="rater_id",
        )
    seen[key] = line


def _judgments_campaign(
    *,
    source: ImportSource,
    slug: str,
    keys: list[str],
    judgments: list[JudgmentSpec],
    user: User | None,
) -> tuple[Campaign, bool]:
    per_candidate: dict[str, int] = defaultdict(int)
    for spec in judgments:
        per_candidate[spec.candidate_external_id] += 1
    quota = max(1, min(100, max(per_candidate.values())))
    questions = with_levels(
        [{"key": key, "label": key.replace("_", " ").capitalize(), "help": ""} for key in keys]
    )
    try:
        with transaction.atomic():
            campaign, created = Campaign.objects.get_or_create(
                slug=slug,
                defaults={
                    "name": slug,
                    "description": f"Judgments imported from {Path(source.name).name}.",
                    "questions": questions,
                    "overall_question_key": "overall" if "overall" in keys else "",
                    "judgments_per_candidate": quota,
                    "is_imported": True,
                    "status": CampaignStatus.CLOSED,
                    "selection": {"source": "judgments_import", "file": Path(source.name).name},
                    "created_by": user if user is not None and user.is_authenticated else None,
                },
            )
    except IntegrityError:
        campaign, created = Campaign.objects.get(slug=slug), False
    if not created and sorted(campaign.question_keys) != sorted(keys):
        # Only when the campaign appeared between validation and writing (a concurrent import).
        raise source.reject(
            f"the campaign {slug!r} asks {', '.join(campaign.question_keys)}; the file rates "
            f"{', '.join(keys)}"
        )
    return campaign, created
