"""The generic judgments format (docs/import-formats.md): rater, candidate, one rating per question,
optional response time and reason, as JSON Lines or CSV, into a campaign. The file is read and its
values checked with `datasets_app`'s import machinery; the campaign and the judgments are written
here."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from annotation.crowd.services.campaign_questions import QUESTION_KEY_PATTERN
from annotation.imports.writers import JudgmentSpec, judgment_rows_write
from annotation.models import Campaign, CampaignStatus
from annotation.questions import Rubric, level_values, with_levels
from datasets_app.models import ImportBatch, ImportKind
from datasets_app.services.imports.base import (
    EXTERNAL_ID_PATTERN,
    Counts,
    FieldError,
    ImportRejected,
    ImportResult,
    ImportSource,
    ProgressCallback,
    clean_identifier,
    clean_milliseconds,
    clean_optional_text,
    clean_rating,
    detect_tabular_format,
    iter_csv_rows,
    iter_jsonl_objects,
)
from datasets_app.services.imports.batches import (
    CampaignWritten,
    import_checked,
    import_open,
    import_write_once,
)

# Stored as "<campaign slug>:<rater id>" in Worker.external_id (200 characters at most).
RATER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:@+-]{1,99}$")
# The campaign a file's judgments go to (created when missing): wider than a crowd campaign's slug
# (`annotation.crowd.services.campaigns.SLUG_PATTERN`), as imported sources name themselves.
CAMPAIGN_SLUG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")
JUDGMENT_LINE_KEYS = {"rater_id", "candidate_id", "values", "response_time_ms", "reason"}
JUDGMENT_CSV_FIXED = ["rater_id", "candidate_id", "response_time_ms", "reason"]
DEFAULT_LEVELS = [1, 2, 3, 4, 5]


def judgment_worker_external_id(*, campaign_slug: str, rater_id: str) -> str:
    """Imported raters are namespaced by campaign: "r1" of two sources are not merged."""
    return f"{campaign_slug}:{rater_id}"


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
    if not isinstance(campaign_slug, str) or not CAMPAIGN_SLUG_PATTERN.match(campaign_slug):
        raise ImportRejected(
            file=str(path),
            message=f"{campaign_slug!r} is not a campaign slug (lowercase letters, digits, - and _)",
        )
    source, watch, earlier = import_open(
        path=path, kind=ImportKind.JUDGMENTS, target=campaign_slug, campaign=campaign_slug
    )
    if earlier is not None:
        return earlier

    campaign = Campaign.objects.filter(slug=campaign_slug).first()
    levels = _campaign_levels(campaign) if campaign is not None else None
    rows = _JudgmentRows(source, levels, campaign_slug, progress)
    keys = (
        rows.read_jsonl()
        if detect_tabular_format(source, file_format) == "jsonl"
        else rows.read_csv()
    )
    judgments = rows.judgments
    import_checked(source, judgments, noun="judgments")

    def write(batch: ImportBatch, counts: Counts) -> CampaignWritten:
        return campaign_judgments_write(
            source=source,
            batch=batch,
            counts=counts,
            slug=campaign_slug,
            keys=keys,
            judgments=judgments,
            user=user,
            progress=progress,
        )

    return import_write_once(
        source=source,
        watch=watch,
        kind=ImportKind.JUDGMENTS,
        target=campaign_slug,
        user=user,
        write=write,
        campaign=campaign_slug,
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


@dataclass
class _JudgmentRows:
    """The judgments of a file checked so far, row by row (JSONL or CSV)."""

    source: ImportSource
    levels: dict[str, list[int]] | None
    campaign_slug: str
    progress: ProgressCallback | None
    judgments: list[JudgmentSpec] = field(default_factory=list)
    seen: dict[tuple[str, str], int] = field(default_factory=dict)

    def read_jsonl(self) -> list[str]:
        """Every line of a JSON Lines file; returns the question keys."""
        keys: list[str] | None = None
        for line, row in iter_jsonl_objects(self.source):
            try:
                unknown = sorted(set(row) - JUDGMENT_LINE_KEYS)
                if unknown:
                    raise FieldError(unknown[0], "unknown field (see docs/import-formats.md)")
                for name in ("rater_id", "candidate_id", "values"):
                    if name not in row:
                        raise FieldError(name, "the field is missing")
                if not isinstance(row["values"], dict):
                    raise FieldError("values", "expected an object {question: rating}")
            except FieldError as error:
                raise self.source.reject(error.message, line=line, field=error.field)
            keys = self.accept(
                row, line=line, raw_values=row["values"], keys=keys, value_field="values."
            )
        return keys or []

    def read_csv(self) -> list[str]:
        """Every row of a CSV file (its header names the questions); returns the question keys."""
        keys: list[str] | None = None

        def check_header(columns: list[str]) -> None:
            nonlocal keys
            keys = self.csv_questions(columns)

        for line, row in iter_csv_rows(
            self.source, required=["rater_id", "candidate_id"], check_header=check_header
        ):
            assert keys is not None
            raw_values = {name: row[name] for name in keys}
            self.accept(row, line=line, raw_values=raw_values, keys=keys, value_field="")
        if self.levels is not None and keys is not None:
            keys = list(self.levels)
        return keys or []

    def csv_questions(self, columns: list[str]) -> list[str]:
        """The question columns of a CSV header, checked against the campaign's questions."""
        questions = [name for name in columns if name not in JUDGMENT_CSV_FIXED]
        if not questions:
            raise self.source.reject("no rating columns: add one column per question", line=1)
        for name in questions:
            if not QUESTION_KEY_PATTERN.match(name):
                raise self.source.reject(
                    "a question column is lowercase letters, digits and _, starting with a letter",
                    line=1,
                    field=name,
                )
        if self.levels is not None:
            for name in questions:
                if name not in self.levels:
                    raise self.source.reject(
                        f"unknown question; the campaign's questions are {', '.join(self.levels)}",
                        line=1,
                        field=name,
                    )
            for name in self.levels:
                if name not in questions:
                    raise self.source.reject(
                        "the campaign's question has no column", line=1, field=name
                    )
        return questions

    def accept(
        self,
        row: Mapping[str, Any],
        *,
        line: int,
        raw_values: dict[str, Any],
        keys: list[str] | None,
        value_field: str,
    ) -> list[str]:
        """Check one row into a judgment, refuse a repeated (rater, candidate) pair, and keep it;
        returns the question keys the rows have shown so far."""
        try:
            spec, keys = _judgment_spec(
                raw_values=raw_values,
                rater=row["rater_id"],
                candidate=row["candidate_id"],
                response_time=row.get("response_time_ms"),
                reason=row.get("reason"),
                levels=self.levels,
                keys=keys,
                campaign_slug=self.campaign_slug,
                value_field=value_field,
            )
        except FieldError as error:
            raise self.source.reject(error.message, line=line, field=error.field)
        _remember(self.source, self.seen, spec, line)
        spec.line = line
        self.judgments.append(spec)
        if self.progress and len(self.judgments) % 5000 == 0:
            self.progress("validating", len(self.judgments), 0)
        return keys


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


def campaign_judgments_write(
    *,
    source: ImportSource,
    batch: ImportBatch,
    counts: Counts,
    slug: str,
    keys: list[str],
    judgments: list[JudgmentSpec],
    user: User | None,
    progress: ProgressCallback | None,
) -> CampaignWritten:
    """Write `judgments` into the campaign `slug` (created when missing, see `judgments_campaign`);
    the write step of the generic judgments and the image importers."""
    campaign, created = judgments_campaign(
        source=source, slug=slug, keys=keys, judgments=judgments, user=user
    )
    counts.add("campaigns", created=int(created), skipped=int(not created))
    judgment_rows_write(
        source=source,
        batch=batch,
        campaign=campaign,
        judgments=judgments,
        counts=counts,
        progress=progress,
    )
    return {"campaign": campaign.slug, "campaign_created": created}


def judgments_campaign(
    *,
    source: ImportSource,
    slug: str,
    keys: list[str],
    judgments: list[JudgmentSpec],
    user: User | None,
) -> tuple[Campaign, bool]:
    """The campaign `slug` that imported judgments go to, created when missing as an imported,
    closed campaign asking `keys` on 1–5 (also used by the image importer)."""
    per_candidate: dict[str, int] = defaultdict(int)
    for spec in judgments:
        per_candidate[spec.candidate_external_id] += 1
    quota = max(1, min(100, max(per_candidate.values())))
    questions = with_levels(
        [{"key": key, "label": key.replace("_", " ").capitalize(), "help": ""} for key in keys],
        Rubric.IMPORTED,
    )
    try:
        with transaction.atomic():
            campaign, created = Campaign.objects.get_or_create(
                slug=slug,
                defaults={
                    "name": slug,
                    "description": f"Judgments imported from {Path(source.name).name}.",
                    "questions": questions,
                    "rubric": Rubric.IMPORTED,
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
