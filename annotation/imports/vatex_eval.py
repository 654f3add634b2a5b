"""Importer of the VATEX-EVAL judgments (`vid_cans_score_dict.json`): clips, references and
candidates through `datasets_app`'s writers, the ratings as imported judgments of the campaign
`vatex-eval`."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from annotation.imports.writers import JudgmentSpec, judgment_rows_write
from annotation.models import Campaign, CampaignStatus
from annotation.questions import Rubric, overall_only_questions
from datasets_app.models import ImportBatch, ImportKind
from datasets_app.services.imports.base import (
    Counts,
    FieldError,
    ImportResult,
    ImportSource,
    ProgressCallback,
    clean_rating,
    clean_text,
    first_undecodable_path,
    iter_json_object_entries,
    parse_vatex_clip_id,
)
from datasets_app.services.imports.batches import (
    CampaignWritten,
    import_checked,
    import_open,
    import_write_once,
)
from datasets_app.services.imports.vatex import MAX_CAPTIONS_PER_CLIP
from datasets_app.services.imports.writers import CandidateSpec, ClipSpec, dataset_rows_write

VATEX_EVAL_CAMPAIGN_SLUG = "vatex-eval"
VATEX_EVAL_SYSTEM_NAME = "vatex-eval"
VATEX_EVAL_SYSTEM_VERSION = "unknown"
VATEX_EVAL_RATER_SLOTS = 3
VATEX_EVAL_RATINGS = [1, 2, 3, 4, 5]
# The `scores` field is a Python literal inside a string; bound it before parsing it.
MAX_SCORES_LITERAL_CHARS = 20_000


def vatex_eval_worker_external_id(slot: int) -> str:
    """The imported rater slot `slot` (1-based) of VATEX-EVAL: an anonymous column, not a person."""
    return f"{VATEX_EVAL_CAMPAIGN_SLUG}:slot-{slot}"


def vatex_eval_candidate_external_id(clip_id: str, index: int) -> str:
    return f"{VATEX_EVAL_CAMPAIGN_SLUG}:{clip_id}:{index}"


def vatex_eval_import(
    *,
    path: str | Path,
    limit: int | None = None,
    user: User | None = None,
    progress: ProgressCallback | None = None,
) -> ImportResult:
    """Clips, their references, the six candidates and the 54,000 ratings of the VATEX-EVAL file
    (`vid_cans_score_dict.json`), the ratings as imported judgments of the campaign `vatex-eval`.

    `limit` imports the first N clips of the file (in file order) and validates only those.
    """
    target = "" if limit is None else f"limit={limit}"
    source, watch, earlier = import_open(
        path=path,
        kind=ImportKind.VATEX_EVAL,
        target=target,
        limit=limit,
        campaign=VATEX_EVAL_CAMPAIGN_SLUG,
    )
    if earlier is not None:
        return earlier
    rows = _vatex_eval_rows(source, limit=limit, progress=progress)
    import_checked(source, rows.clips, noun="clips", complete=rows.complete)

    def write(batch: ImportBatch, counts: Counts) -> CampaignWritten:
        return _vatex_eval_write(
            source=source, batch=batch, counts=counts, rows=rows, user=user, progress=progress
        )

    return import_write_once(
        source=source,
        watch=watch,
        kind=ImportKind.VATEX_EVAL,
        target=target,
        user=user,
        write=write,
        campaign=VATEX_EVAL_CAMPAIGN_SLUG,
    )


def _vatex_eval_write(
    *,
    source: ImportSource,
    batch: ImportBatch,
    counts: Counts,
    rows: VatexEvalRows,
    user: User | None,
    progress: ProgressCallback | None,
) -> CampaignWritten:
    """The campaign, the clips with their references and candidates, then the ratings."""
    campaign, campaign_created = _vatex_eval_campaign(source=source, user=user)
    counts.add("campaigns", created=int(campaign_created), skipped=int(not campaign_created))
    dataset_rows_write(
        source=source,
        batch=batch,
        clips=rows.clips,
        candidates=rows.candidates,
        counts=counts,
        progress=progress,
    )
    judgment_rows_write(
        source=source,
        batch=batch,
        campaign=campaign,
        judgments=rows.judgments,
        counts=counts,
        progress=progress,
    )
    return {"campaign": campaign.slug, "campaign_created": campaign_created}


@dataclass
class VatexEvalRows:
    """What the checked clips of a VATEX-EVAL file bring; `complete` is False when `limit` cut
    the file short."""

    clips: list[ClipSpec] = field(default_factory=list)
    candidates: list[CandidateSpec] = field(default_factory=list)
    judgments: list[JudgmentSpec] = field(default_factory=list)
    complete: bool = True


def _vatex_eval_rows(
    source: ImportSource, *, limit: int | None, progress: ProgressCallback | None
) -> VatexEvalRows:
    """Check the file's clips in file order (the first `limit` of them), each spec placed at its
    clip's line and column."""
    rows = VatexEvalRows()
    for key, entry, offset in iter_json_object_entries(source):
        if limit is not None and len(rows.clips) >= limit:
            rows.complete = False
            break
        line, column = source.position(offset)
        try:
            clip, clip_candidates, clip_judgments = _vatex_eval_entry(key, entry, source=source)
        except FieldError as error:
            raise source.reject(
                f"clip {key!r}: {error.message}", line=line, column=column, field=error.field
            )
        clip.line, clip.column = line, column
        for candidate in clip_candidates:
            candidate.line, candidate.column = line, column
        for judgment in clip_judgments:
            judgment.line, judgment.column = line, column
        rows.clips.append(clip)
        rows.candidates.extend(clip_candidates)
        rows.judgments.extend(clip_judgments)
        if progress and len(rows.clips) % 250 == 0:
            progress("validating", len(rows.clips), 0)
    return rows


def _vatex_eval_entry(
    key: str, entry: Any, *, source: ImportSource
) -> tuple[ClipSpec, list[CandidateSpec], list[JudgmentSpec]]:
    identity = parse_vatex_clip_id(key, field="(key)")
    if not isinstance(entry, dict):
        raise FieldError("(value)", "expected an object with vid, cands, scores and refs")
    if source.first_bad_offset is not None:
        bad = first_undecodable_path(entry)
        if bad:
            raise FieldError(bad, "the text is not valid UTF-8")
    for name in ("vid", "cands", "scores", "refs"):
        if name not in entry:
            raise FieldError(name, "the field is missing")
    if entry["vid"] != key:
        raise FieldError("vid", f"{entry['vid']!r} differs from the clip's key {key!r}")

    texts = entry["cands"]
    if not isinstance(texts, list) or not texts:
        raise FieldError("cands", "expected a non-empty list of candidate captions")
    if len(texts) > MAX_CAPTIONS_PER_CLIP:
        raise FieldError("cands", f"more than {MAX_CAPTIONS_PER_CLIP} candidates")
    candidate_texts = [clean_text(text, field=f"cands[{i}]") for i, text in enumerate(texts)]

    refs = entry["refs"]
    # The file nests the nine references in one more list: [[r1, ..., r9]].
    if isinstance(refs, list) and refs and all(isinstance(item, list) for item in refs):
        if len(refs) != 1:
            raise FieldError("refs", f"expected one list of references, got {len(refs)} lists")
        refs, reference_field = refs[0], "refs[0]"
    else:
        reference_field = "refs"
    if not isinstance(refs, list) or not refs:
        raise FieldError(reference_field, "expected a non-empty list of reference captions")
    if len(refs) > MAX_CAPTIONS_PER_CLIP:
        raise FieldError(reference_field, f"more than {MAX_CAPTIONS_PER_CLIP} references")
    references = [clean_text(text, field=f"{reference_field}[{i}]") for i, text in enumerate(refs)]

    ratings = _vatex_eval_scores(entry["scores"], candidates=len(candidate_texts))

    clip = ClipSpec(
        clip_id=identity.vatex_id,
        identity=identity,
        line=None,
        field="(key)",
        references=references,
        reference_field=reference_field,
    )
    candidates: list[CandidateSpec] = []
    judgments: list[JudgmentSpec] = []
    for index, text in enumerate(candidate_texts):
        external_id = vatex_eval_candidate_external_id(identity.vatex_id, index)
        candidates.append(
            CandidateSpec(
                external_id=external_id,
                clip_id=identity.vatex_id,
                text=text,
                system_name=VATEX_EVAL_SYSTEM_NAME,
                system_version=VATEX_EVAL_SYSTEM_VERSION,
                position=index,
                line=None,
                field=f"cands[{index}]",
            )
        )
        for slot, rating in enumerate(ratings[index], start=1):
            judgments.append(
                JudgmentSpec(
                    candidate_external_id=external_id,
                    worker_external_id=vatex_eval_worker_external_id(slot),
                    values={"overall": rating},
                    line=None,
                    field=f"scores[{index}][{slot - 1}]",
                )
            )
    return clip, candidates, judgments


def _vatex_eval_scores(raw: Any, *, candidates: int) -> list[list[int]]:
    """`scores` holds a Python list literal in a string (e.g. "[[5.0, 4.0, 4.0], ...]"): parsed
    with ast.literal_eval, never eval; one row of three whole ratings 1–5 per candidate."""
    if isinstance(raw, str):
        if len(raw) > MAX_SCORES_LITERAL_CHARS:
            raise FieldError("scores", "the scores text is too long")
        try:
            parsed = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise FieldError("scores", f"{raw[:60]!r} is not a list literal of ratings")
    else:
        parsed = raw
    if not isinstance(parsed, (list, tuple)):
        raise FieldError("scores", "expected a list with one row of ratings per candidate")
    if len(parsed) != candidates:
        raise FieldError(
            "scores",
            f"{len(parsed)} rows of ratings for {candidates} candidates (one per candidate)",
        )
    rows: list[list[int]] = []
    for index, row in enumerate(parsed):
        if not isinstance(row, (list, tuple)) or len(row) != VATEX_EVAL_RATER_SLOTS:
            raise FieldError(
                f"scores[{index}]",
                f"expected {VATEX_EVAL_RATER_SLOTS} ratings (one per rater slot)",
            )
        rows.append(
            [
                clean_rating(value, field=f"scores[{index}][{slot}]", allowed=VATEX_EVAL_RATINGS)
                for slot, value in enumerate(row)
            ]
        )
    return rows


def _vatex_eval_campaign(*, source: ImportSource, user: User | None) -> tuple[Campaign, bool]:
    """The imported campaign holding the VATEX-EVAL ratings: one `overall` question 1–5, three
    judgments per candidate, closed to the crowd."""
    try:
        with transaction.atomic():
            campaign, created = Campaign.objects.get_or_create(
                slug=VATEX_EVAL_CAMPAIGN_SLUG,
                defaults={
                    "name": "VATEX-EVAL (imported)",
                    "description": "Human judgments of the VATEX-EVAL benchmark (Shi et al., "
                    "EMScore, CVPR 2022; MIT licence): one overall rating 1–5 per candidate from "
                    "each of three anonymous rater slots. Imported, not collected here.",
                    "questions": overall_only_questions(Rubric.IMPORTED),
                    "rubric": Rubric.IMPORTED,
                    "overall_question_key": "overall",
                    "judgments_per_candidate": VATEX_EVAL_RATER_SLOTS,
                    "is_imported": True,
                    "status": CampaignStatus.CLOSED,
                    "selection": {"source": "vatex_eval", "file": Path(source.name).name},
                    "created_by": user if user is not None and user.is_authenticated else None,
                },
            )
    except IntegrityError:  # created by a concurrent import between our read and insert
        campaign, created = Campaign.objects.get(slug=VATEX_EVAL_CAMPAIGN_SLUG), False
    if not created and (not campaign.is_imported or campaign.question_keys != ["overall"]):
        raise source.reject(
            f"the campaign {VATEX_EVAL_CAMPAIGN_SLUG!r} exists but is not an imported campaign "
            "with the single question 'overall'; rename it before importing VATEX-EVAL"
        )
    return campaign, created
