"""Rater-severity calibration of a campaign as a job: read, fit per question, store.

- `calibration_run_start(campaign=...)` queues a `CalibrationRun` (one active run per campaign)
  and publishes the Celery task `annotation.calibration_run` after commit. A successful QC run
  queues one (the calibration then sees the judgments QC kept).
- `calibration_run_execute(run_id=...)` claims and runs it with the `common.jobs` lifecycle.
- `calibration_campaign(campaign=...)` is the computation: the kept judgments of the campaign's
  non-control candidates are read as columns (one COPY), the model of
  `annotation.quality.calibration` is fitted per question, and the results replace the campaign's
  previous ones: a `WorkerSeverity` per worker and question, a `CandidateCalibration` per rated
  candidate (written with one COPY into a temporary table and one INSERT ... SELECT). An
  expert's resolution of a question wins over the model, as it wins over the raw mean in
  aggregation.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np
from django.db import connection, transaction
from django.utils import timezone
from numpy.typing import NDArray

from annotation.crowd.services.columns import (
    ColumnKind,
    copy_to_temp_table,
    fetch_columns,
    json_number,
)
from annotation.models import (
    CalibrationRun,
    Campaign,
    CampaignCandidate,
    CandidateCalibration,
    Judgment,
    Participation,
    QCRun,
    WorkerSeverity,
)
from annotation.quality.calibration import (
    MODEL_NAME,
    CalibrationFit,
    CalibrationSettings,
    RatingTable,
    calibration_fit,
)
from annotation.quality.jobs import ProgressCallback, campaign_run_inline, campaign_run_queue
from annotation.quality.statistics import overall_scores
from common.jobs import job_execute
from common.models import JobStatus

logger = logging.getLogger(__name__)

DEFAULT_SCALE_POINTS = 5
SEVERITY_EXPLANATION = (
    "How much harsher (positive) or more lenient (negative) than the campaign's average rater "
    "this worker rates the same candidates, in logits of the rating model, averaged over the "
    "questions, ± its standard error; the interval in brackets holds the true value with 95% "
    "probability. 0 is average; ±0.5 shifts a typical rating by about a third of a point."
)


def _scale_points(question: dict[str, Any]) -> int:
    values = [
        int(level["value"])
        for level in question.get("levels", [])
        if isinstance(level, dict) and isinstance(level.get("value"), (int, float))
    ]
    return max(values) if values and min(values) == 1 and max(values) >= 2 else DEFAULT_SCALE_POINTS


class CampaignRatings:
    """Kept judgments of the non-control candidates of a campaign, as columns."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.question_keys = campaign.question_keys
        values_column = 'j."values"'
        value_columns = "".join(
            f", COALESCE({json_number(values_column, key)}, 0)" for key in self.question_keys
        )
        columns: list[tuple[str, ColumnKind]] = [("candidate", "int8"), ("participation", "int8")]
        columns += [(f"q{index}", "float8") for index in range(len(self.question_keys))]
        rows = fetch_columns(
            f"SELECT j.campaign_candidate_id, j.participation_id{value_columns} "
            f"FROM {Judgment._meta.db_table} j "
            f"JOIN {CampaignCandidate._meta.db_table} cc ON cc.id = j.campaign_candidate_id "
            f"WHERE j.campaign_id = %s AND NOT j.is_excluded AND NOT cc.is_control",
            [campaign.pk],
            columns,
        )
        self.candidate_ids, self.item = np.unique(rows["candidate"], return_inverse=True)
        self.participation_ids, self.rater = np.unique(rows["participation"], return_inverse=True)
        self.values = {
            key: np.rint(rows[f"q{index}"]).astype(np.int64)
            for index, key in enumerate(self.question_keys)
        }
        self.resolutions: dict[int, dict[str, float]] = {}
        resolved = CampaignCandidate.objects.filter(campaign=campaign).exclude(resolution={})
        for candidate_id, resolution in resolved.values_list("id", "resolution"):
            values = (resolution or {}).get("values") or {}
            position = int(np.searchsorted(self.candidate_ids, candidate_id))
            found = position < len(self.candidate_ids) and (
                self.candidate_ids[position] == candidate_id
            )
            if values and found:
                self.resolutions[position] = {
                    key: float(value) for key, value in values.items() if value is not None
                }

    def __len__(self) -> int:
        return len(self.item)

    def table(self, key: str, *, categories: int) -> RatingTable:
        value = self.values[key]
        answered = (value >= 1) & (value <= categories)
        return RatingTable(
            item=self.item[answered],
            rater=self.rater[answered],
            value=value[answered],
            items=len(self.candidate_ids),
            raters=len(self.participation_ids),
            categories=categories,
        )


def calibration_campaign(
    *,
    campaign: Campaign,
    progress: ProgressCallback | None = None,
    run: CalibrationRun | None = None,
    settings: CalibrationSettings | None = None,
) -> dict[str, Any]:
    """Fit every question of `campaign` and store the results; returns the run summary."""
    settings = settings or CalibrationSettings()
    report = progress or (lambda fraction, message: None)
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        timings[name] = round(time.perf_counter() - clock, 3)
        clock = time.perf_counter()

    report(0.02, "reading the kept judgments")
    data = CampaignRatings(campaign)
    lap("load")
    questions = {question["key"]: question for question in campaign.questions}
    fits: dict[str, CalibrationFit] = {}
    for index, key in enumerate(data.question_keys):
        report(0.1 + 0.7 * index / max(len(data.question_keys), 1), f"fitting {key}")
        table = data.table(key, categories=_scale_points(questions.get(key, {})))
        if len(table) == 0:
            continue
        fits[key] = calibration_fit(table, settings=settings)
        lap(f"fit_{key}")
    report(0.85, "storing severities and calibrated scores")
    with transaction.atomic():
        severities = _severities_store(campaign=campaign, data=data, fits=fits, run=run)
        candidates = _candidates_store(campaign=campaign, data=data, fits=fits, run=run)
    lap("store")
    return {
        "model": MODEL_NAME,
        "settings": settings.as_dict(),
        "judgments": len(data),
        "workers": len(data.participation_ids),
        "candidates": candidates,
        "severities": severities,
        "questions": {key: fit.statistics for key, fit in fits.items()},
        "timings": timings,
    }


def _severities_store(
    *,
    campaign: Campaign,
    data: CampaignRatings,
    fits: dict[str, CalibrationFit],
    run: CalibrationRun | None,
) -> int:
    """Replace the campaign's severities; returns how many there are now."""
    now = timezone.now()
    participation_ids = data.participation_ids
    ids, keys, severity, error, judgments, infit, outfit = [], [], [], [], [], [], []
    for key_index, fit in enumerate(fits.values()):
        rated = np.flatnonzero(fit.rater_ratings > 0)
        ids.append(participation_ids[rated])
        keys.append(np.full(len(rated), key_index, dtype=np.int64))
        severity.append(fit.severity[rated])
        error.append(fit.severity_se[rated])
        judgments.append(fit.rater_ratings[rated])
        infit.append(fit.infit[rated])
        outfit.append(fit.outfit[rated])
    if not ids:
        WorkerSeverity.objects.filter(participation__campaign=campaign).delete()
        return 0
    key_names = list(fits)
    columns = {
        "id": np.concatenate(ids),
        "key": np.concatenate(keys),
        "severity": np.concatenate(severity),
        "error": np.concatenate(error),
        "judgments": np.concatenate(judgments),
        "infit": np.concatenate(infit),
        "outfit": np.concatenate(outfit),
    }
    copy_to_temp_table(
        "calibration_severities",
        [
            ("id", "int8", columns["id"]),
            ("key", "int2", columns["key"]),
            ("severity", "float8", columns["severity"]),
            ("error", "float8", columns["error"]),
            ("judgments", "int4", columns["judgments"]),
            ("infit", "float8", columns["infit"]),
            ("outfit", "float8", columns["outfit"]),
        ],
    )
    table = WorkerSeverity._meta.db_table
    participations = Participation._meta.db_table
    key_case = " ".join(f"WHEN {index} THEN %s" for index in range(len(key_names)))
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} ws USING {participations} p WHERE p.id = ws.participation_id "
            f"AND p.campaign_id = %s AND NOT EXISTS (SELECT 1 FROM calibration_severities t "
            f"WHERE t.id = ws.participation_id AND (CASE t.key {key_case} END) = ws.question_key)",
            [campaign.pk, *key_names],
        )
        # Only rows whose values change are written: a re-run on unchanged judgments (the fit is
        # deterministic) writes nothing.
        cursor.execute(
            f"INSERT INTO {table} AS ws (participation_id, question_key, severity, "
            f"standard_error, judgments, infit, outfit, run_id, computed_at) "
            f"SELECT t.id, CASE t.key {key_case} END, t.severity, t.error, t.judgments, "
            f"NULLIF(t.infit, 'NaN'), NULLIF(t.outfit, 'NaN'), %s, %s "
            f"FROM calibration_severities t "
            f"ON CONFLICT (participation_id, question_key) DO UPDATE SET "
            f"severity = EXCLUDED.severity, standard_error = EXCLUDED.standard_error, "
            f"judgments = EXCLUDED.judgments, infit = EXCLUDED.infit, outfit = EXCLUDED.outfit, "
            f"run_id = EXCLUDED.run_id, computed_at = EXCLUDED.computed_at "
            f"WHERE (ws.severity, ws.standard_error, ws.judgments, ws.infit, ws.outfit) "
            f"IS DISTINCT FROM (EXCLUDED.severity, EXCLUDED.standard_error, EXCLUDED.judgments, "
            f"EXCLUDED.infit, EXCLUDED.outfit)",
            [*key_names, run.pk if run else None, now],
        )
    return len(columns["id"])


def candidate_scores(
    *, data: CampaignRatings, fits: dict[str, CalibrationFit], overall_key: str
) -> dict[str, NDArray[np.float64]]:
    """Per candidate of `data`: calibrated score, standard error and latent quality per question
    (NaN where not rated; an expert resolution replaces the score, with no standard error) and
    the calibrated overall."""
    count = len(data.candidate_ids)
    columns: dict[str, NDArray[np.float64]] = {}
    for key in data.question_keys:
        fit = fits.get(key)
        score = fit.calibrated.copy() if fit else np.full(count, np.nan)
        error = fit.calibrated_se.copy() if fit else np.full(count, np.nan)
        columns[f"score:{key}"] = score
        columns[f"se:{key}"] = error
        columns[f"quality:{key}"] = fit.quality.copy() if fit else np.full(count, np.nan)
    for position, resolution in data.resolutions.items():
        for key, value in resolution.items():
            if f"score:{key}" in columns:
                columns[f"score:{key}"][position] = value
                columns[f"se:{key}"][position] = np.nan
    scores = np.column_stack([columns[f"score:{key}"] for key in data.question_keys])
    columns["overall"] = overall_scores(
        scores, question_keys=data.question_keys, overall_key=overall_key
    )
    return columns


def _candidates_store(
    *,
    campaign: Campaign,
    data: CampaignRatings,
    fits: dict[str, CalibrationFit],
    run: CalibrationRun | None,
) -> int:
    """Replace the campaign's calibrated scores; returns how many candidates have one now."""
    if len(data.candidate_ids) == 0:
        CandidateCalibration.objects.filter(campaign=campaign).delete()
        return 0
    columns = candidate_scores(data=data, fits=fits, overall_key=campaign.overall_question_key)
    keys = data.question_keys
    now = timezone.now()
    temp: list[tuple[str, Any, Any]] = [("id", "int8", data.candidate_ids)]
    temp.append(("overall", "float8", columns["overall"]))
    for index, key in enumerate(keys):
        temp += [
            (f"s{index}", "float8", columns[f"score:{key}"]),
            (f"e{index}", "float8", columns[f"se:{key}"]),
            (f"q{index}", "float8", columns[f"quality:{key}"]),
        ]
    copy_to_temp_table("calibration_scores", temp)

    def json_object(prefix: str) -> str:
        if not keys:
            return "'{}'::jsonb"
        pairs = ", ".join(
            f"%s::text, NULLIF(t.{prefix}{index}, 'NaN')" for index in range(len(keys))
        )
        return f"jsonb_strip_nulls(jsonb_build_object({pairs}))"

    table = CandidateCalibration._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} cal WHERE cal.campaign_id = %s AND NOT EXISTS "
            f"(SELECT 1 FROM calibration_scores t WHERE t.id = cal.campaign_candidate_id)",
            [campaign.pk],
        )
        # Only rows whose values change are written (none of the columns written is
        # indexed, so PostgreSQL updates them in place); an unchanged re-run writes nothing.
        cursor.execute(
            f"INSERT INTO {table} AS cal (campaign_id, campaign_candidate_id, scores, "
            f"standard_errors, quality, overall, run_id, computed_at) "
            f"SELECT %s, t.id, {json_object('s')}, {json_object('e')}, {json_object('q')}, "
            f"NULLIF(t.overall, 'NaN'), %s, %s FROM calibration_scores t "
            f"ON CONFLICT (campaign_candidate_id) DO UPDATE SET scores = EXCLUDED.scores, "
            f"standard_errors = EXCLUDED.standard_errors, quality = EXCLUDED.quality, "
            f"overall = EXCLUDED.overall, run_id = EXCLUDED.run_id, "
            f"computed_at = EXCLUDED.computed_at "
            f"WHERE (cal.scores, cal.standard_errors, cal.quality, cal.overall) IS DISTINCT "
            f"FROM (EXCLUDED.scores, EXCLUDED.standard_errors, EXCLUDED.quality, "
            f"EXCLUDED.overall)",
            [campaign.pk, *keys, *keys, *keys, run.pk if run else None, now],
        )
    return len(data.candidate_ids)


# ----------------------------------------------------------------------------------------------
# The job
# ----------------------------------------------------------------------------------------------


def calibration_run_start(
    *, campaign: Campaign, requested_by: Any = None, qc_run: QCRun | None = None
) -> CalibrationRun:
    """Queue a calibration (returns the run already queued or running, if any)."""
    from common.tasks import task_named

    return campaign_run_queue(
        model=CalibrationRun,
        campaign=campaign,
        task=task_named("annotation.calibration_run"),
        requested_by=requested_by,
        qc_run=qc_run,
    )


def calibration_run_inline(*, campaign: Campaign) -> CalibrationRun:
    """A calibration executed in this process (`manage.py calibrate`): the same run row and job
    lifecycle as a queued run, without the broker. Returns the finished run."""
    return campaign_run_inline(
        model=CalibrationRun, campaign=campaign, execute=calibration_run_execute
    )


def calibration_run_execute(*, run_id: int, task_id: str = "") -> CalibrationRun | None:
    """Run a queued calibration (claimed atomically: two workers never run the same one)."""
    run, _ = job_execute(
        model=CalibrationRun,
        job_id=run_id,
        task_id=task_id,
        work=lambda run, progress: calibration_campaign(
            campaign=run.campaign, progress=progress, run=run
        ),
    )
    return run


# ----------------------------------------------------------------------------------------------
# Reads for the pages and the API
# ----------------------------------------------------------------------------------------------


def worker_severities(
    *, campaign: Campaign, participation_ids: list[int] | None = None
) -> dict[int, dict[str, SeverityEntry]]:
    """{participation id: {question key: {"severity", "standard_error", "low", "high",
    "judgments", "infit", "outfit"}}} from the latest calibration; low/high bound the 95%
    interval (severity ± 1.96 standard errors)."""
    rows = WorkerSeverity.objects.filter(participation__campaign=campaign)
    if participation_ids is not None:
        rows = rows.filter(participation_id__in=participation_ids)
    result: dict[int, dict[str, SeverityEntry]] = {}
    for row in rows.order_by("participation_id", "question_key"):
        result.setdefault(row.participation_id, {})[row.question_key] = severity_entry(row)
    return result


class SeverityInterval(TypedDict):
    """A severity with its standard error and 95% interval (severity ± 1.96 standard errors)."""

    severity: float
    standard_error: float
    low: float
    high: float


class SeverityEntry(SeverityInterval):
    judgments: int
    infit: float | None
    outfit: float | None


def severity_entry(row: WorkerSeverity) -> SeverityEntry:
    return {
        "severity": round(row.severity, 4),
        "standard_error": round(row.standard_error, 4),
        "low": round(row.severity - 1.96 * row.standard_error, 4),
        "high": round(row.severity + 1.96 * row.standard_error, 4),
        "judgments": row.judgments,
        "infit": None if row.infit is None else round(row.infit, 3),
        "outfit": None if row.outfit is None else round(row.outfit, 3),
    }


def severity_mean(entries: Mapping[str, SeverityInterval]) -> SeverityInterval | None:
    """A worker's severity averaged over the questions (for sorting and the table's summary
    column); its standard error treats the questions' errors as independent."""
    if not entries:
        return None
    values = [entry["severity"] for entry in entries.values()]
    errors = [entry["standard_error"] for entry in entries.values()]
    severity = sum(values) / len(values)
    error = math.sqrt(sum(value**2 for value in errors)) / len(errors)
    return {
        "severity": round(severity, 4),
        "standard_error": round(error, 4),
        "low": round(severity - 1.96 * error, 4),
        "high": round(severity + 1.96 * error, 4),
    }


def calibration_latest(*, campaign: Campaign) -> CalibrationRun | None:
    return (
        CalibrationRun.objects.filter(campaign=campaign, status=JobStatus.SUCCEEDED)
        .order_by("-finished_at", "-pk")
        .first()
    )


# Fit statistics a release card and manifest carry (no timings: they would change the bytes).
RELEASE_STATISTICS = (
    "judgments",
    "items",
    "raters",
    "categories",
    "thresholds",
    "severity_sd",
    "severity_min",
    "severity_max",
    "severity_se_median",
    "severity_reliability",
    "infit_mean_square",
    "outfit_mean_square",
    "raters_misfitting",
    "log_likelihood",
    "deviance",
    "aic",
    "bic",
    "calibrated_vs_raw_correlation",
    "calibrated_vs_raw_mean_absolute_difference",
    "converged",
    "iterations",
)


def calibration_release_facts(*, campaign_ids: list[int]) -> list[dict[str, Any]]:
    """Per campaign (by slug) with a successful calibration: the model, its settings and per
    question the fit statistics of `RELEASE_STATISTICS`, for a release's card and manifest."""
    facts = []
    campaigns = Campaign.objects.filter(pk__in=campaign_ids).order_by("slug")
    for campaign in campaigns:
        run = calibration_latest(campaign=campaign)
        if run is None:
            continue
        questions = run.summary.get("questions", {})
        facts.append(
            {
                "campaign": campaign.slug,
                "model": run.summary.get("model", MODEL_NAME),
                "settings": run.summary.get("settings", {}),
                "questions": {
                    key: {name: questions[key].get(name) for name in RELEASE_STATISTICS}
                    for key in sorted(questions)
                },
            }
        )
    return facts
