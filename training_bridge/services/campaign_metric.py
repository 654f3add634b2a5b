"""The metric in the loop (issue 28; docs/quality.md, "The metric in the loop"): checking the metric
a campaign names, and scoring the campaign's candidates with it.

A campaign names "rigel-run:<TrainingRun id>" or "plugin:<name>" (`Campaign.metric`). annotation
cannot import this app, so `campaign_metric_checker` is registered in `common.campaign_metric` by
`TrainingBridgeConfig.ready()` and annotation's campaign service asks it; the scoring job
(`campaign_metric_score`, task `training_bridge.tasks.campaign_metric_score`) is sent by name
after candidates are added and after a metric is set.

Scores are on the campaign's rating scale (its lowest to its highest level value; 1..5 for every
built-in rubric), so the crowd's mean and the metric's score are comparable:
- a Rigel run: the expected rating of its five-way distribution, mapped linearly from 1..5 onto
  the scale, and the distribution's standard deviation as the uncertainty (same mapping);
- a plug-in (text-only: BLEU, ROUGE-L, METEOR, CIDEr-D): its score divided by the metric's ceiling
  (`PLUGIN_CEILINGS`, 1 unless named; a score above it counts as the ceiling), mapped linearly
  onto the scale. A plug-in gives no distribution: the uncertainty stays None.

The job's failure story: it works under a PostgreSQL advisory lock per campaign (a second job for
the same campaign waits, then finds nothing left to score); it scores batches of `BATCH`
candidates, and a batch that fails is retried one candidate at a time, so a bad item (a clip
without media, a caption the metric refuses) is logged and left unscored (the next job tries it
again) while the others are written. A score is written only where the candidate has none and the
campaign still names the same metric (a curator may change it while the job runs). After each
batch it sends `annotation.allocation_redecide` with the candidates just scored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection

from annotation.models import Campaign, CampaignCandidate
from annotation.questions import level_values
from common.broker import publish_now, task_named
from datasets_app.models import Clip, ReferenceCaption
from training_bridge.models import TrainingRun

logger = logging.getLogger(__name__)

ALLOCATION_REDECIDE_TASK = "annotation.allocation_redecide"
RIGEL_PREFIX = "rigel-run:"
PLUGIN_PREFIX = "plugin:"
BATCH = 64
# The most a plug-in scores (the top of the campaign's scale); 1 for the metrics not named.
PLUGIN_CEILINGS = {"cider": 10.0}
# pg_advisory_lock's first key: this job's lock space (the second key is the campaign id).
_LOCK_SPACE = 28_002


@dataclass(frozen=True)
class MetricScore:
    score: float  # on the campaign's scale
    uncertainty: float | None


@dataclass
class MetricScoringResult:
    """What one job did: candidates scored and left unscored (with why), or why it did nothing."""

    campaign_id: int
    metric: str
    scored: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    refused: str = ""


# --- the check -----------------------------------------------------------------------------------


def campaign_metric_checker(metric: str, clip_ids: frozenset[int]) -> str | None:
    """Why a campaign over these clips may not name `metric` (None: it may). Registered in
    `common.campaign_metric` (see apps.py)."""
    if metric.startswith(RIGEL_PREFIX):
        return _run_problem(metric.removeprefix(RIGEL_PREFIX), clip_ids)
    if metric.startswith(PLUGIN_PREFIX):
        return _plugin_problem(metric.removeprefix(PLUGIN_PREFIX))
    return f"Unknown metric {metric!r}: rigel-run:<id> or plugin:<name>."


def _run_problem(run_id: str, clip_ids: frozenset[int]) -> str | None:
    from training_bridge.services.rigel_benchmark.campaign import refuse_leakage
    from training_bridge.services.rigel_benchmark.plan import RigelEvaluationError

    run = TrainingRun.objects.filter(pk=int(run_id)).first() if run_id.isdigit() else None
    if run is None:
        return f"No training run {run_id}."
    if not run.can_score:
        return f"Training run {run.pk} is {run.status}; only a finished (succeeded) run scores."
    vatex_ids = set(Clip.objects.filter(pk__in=clip_ids).values_list("vatex_id", flat=True))
    try:
        refuse_leakage([run], vatex_ids)
    except RigelEvaluationError as error:
        return str(error)
    return None


def _plugin_problem(name: str) -> str | None:
    from training_bridge.metrics.plugins import METRIC_NAMES, available_metrics

    if name not in METRIC_NAMES:
        return f"No metric plug-in {name!r}; known: {', '.join(METRIC_NAMES)}."
    metrics, unavailable = available_metrics({}, [name])
    if name in unavailable:
        return f"Metric {name} cannot run here: {unavailable[name]}."
    if metrics[name].needs_video:
        return f"Metric {name} needs the clip's video; the loop takes text-only plug-ins."
    return None


# --- the scorers -----------------------------------------------------------------------------------

Scorer = Callable[[Sequence[CampaignCandidate]], list[MetricScore]]


def campaign_scale(campaign: Campaign) -> tuple[float, float]:
    """The lowest and highest level value of the campaign's overall rating (every question's when
    the overall is their mean)."""
    questions = [
        question
        for question in campaign.questions
        if not campaign.overall_question_key or question["key"] == campaign.overall_question_key
    ]
    values = [value for question in questions for value in level_values(question)] or [1, 5]
    return float(min(values)), float(max(values))


def _references(rows: Sequence[CampaignCandidate]) -> dict[int, list[str]]:
    references: dict[int, list[str]] = {row.clip_id: [] for row in rows}
    for clip_id, text in (
        ReferenceCaption.objects.filter(clip_id__in=list(references))
        .order_by("clip_id", "position")
        .values_list("clip_id", "text")
    ):
        references[clip_id].append(text)
    return references


def rigel_scorer(run: TrainingRun, scale: tuple[float, float]) -> Scorer:
    from training_bridge.rigel.scoring import rating_moments
    from training_bridge.services.scoring import ScoreItem, rating_distributions

    low, high = scale

    def score(rows: Sequence[CampaignCandidate]) -> list[MetricScore]:
        references = _references(rows)
        items: list[ScoreItem] = [
            {
                "clip": row.clip.vatex_id,
                "frames_key": row.clip.frames_key or "",
                "video_key": row.clip.video_key or "",
                "duration": row.clip.duration,
                "references": [] if run.reference_free else references[row.clip_id],
                "candidate": row.candidate.text,
            }
            for row in rows
        ]
        expected, spread = rating_moments(rating_distributions(run=run, items=items))
        step = (high - low) / 4  # Rigel's five levels: four steps from 1 to 5
        return [
            MetricScore(low + (float(mean) - 1.0) * step, float(deviation) * step)
            for mean, deviation in zip(expected, spread, strict=True)
        ]

    return score


def plugin_scorer(name: str, scale: tuple[float, float]) -> Scorer:
    from training_bridge.metrics.plugins import MetricItem, available_metrics

    metric = available_metrics({}, [name])[0][name]
    ceiling = PLUGIN_CEILINGS.get(name, 1.0)
    low, high = scale

    def score(rows: Sequence[CampaignCandidate]) -> list[MetricScore]:
        references = _references(rows)
        items = [MetricItem(row.candidate.text, tuple(references[row.clip_id])) for row in rows]
        return [
            MetricScore(low + min(max(float(value) / ceiling, 0.0), 1.0) * (high - low), None)
            for value in metric.score(items)
        ]

    return score


def campaign_scorer(campaign: Campaign) -> Scorer:
    metric, scale = campaign.metric, campaign_scale(campaign)
    if metric.startswith(RIGEL_PREFIX):
        run = TrainingRun.objects.select_related("release").get(
            pk=int(metric.removeprefix(RIGEL_PREFIX))
        )
        return rigel_scorer(run, scale)
    return plugin_scorer(metric.removeprefix(PLUGIN_PREFIX), scale)


# --- the job ------------------------------------------------------------------------------------


@contextmanager
def _campaign_lock(campaign_id: int) -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", [_LOCK_SPACE, campaign_id])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [_LOCK_SPACE, campaign_id])


def _unscored(campaign: Campaign) -> list[CampaignCandidate]:
    return list(
        CampaignCandidate.objects.filter(
            campaign=campaign, is_control=False, dropped=False, metric_score__isnull=True
        )
        .select_related("candidate", "clip")
        .order_by("id")
    )


def campaign_metric_score(*, campaign_id: int, scorer: Scorer | None = None) -> MetricScoringResult:
    """Score the campaign's candidates that have no metric score yet (see the module docstring);
    `scorer` replaces the campaign's own (tests)."""
    with _campaign_lock(campaign_id):
        campaign = Campaign.objects.filter(pk=campaign_id).first()
        result = MetricScoringResult(campaign_id, campaign.metric if campaign else "")
        if campaign is None or not campaign.metric:
            result.refused = "the campaign names no metric" if campaign else "no such campaign"
            return result
        rows = _unscored(campaign)
        clip_ids = CampaignCandidate.objects.filter(campaign=campaign).values_list("clip_id")
        # Candidates imported since the metric was named may share clips with the run's release.
        problem = campaign_metric_checker(campaign.metric, frozenset(c for (c,) in clip_ids))
        if problem:
            result.refused = problem
            logger.error(
                "campaign %s: metric %s refused: %s", campaign.slug, result.metric, problem
            )
            return result
        if not rows:
            return result
        scorer = scorer or campaign_scorer(campaign)
        for start in range(0, len(rows), BATCH):
            _score_batch(campaign, rows[start : start + BATCH], scorer, result)
            logger.info(
                "campaign %s: metric %s scored %d of %d (%d failed)",
                campaign.slug,
                result.metric,
                len(result.scored),
                len(rows),
                len(result.failed),
            )
    return result


def _score_batch(
    campaign: Campaign,
    rows: Sequence[CampaignCandidate],
    scorer: Scorer,
    result: MetricScoringResult,
) -> None:
    try:
        scored = list(zip(rows, scorer(rows), strict=True))
    except Exception:  # one bad item fails the batch: score its items one at a time
        logger.warning("campaign %s: a batch failed; scoring it item by item", campaign.slug)
        scored = []
        for row in rows:
            try:
                scored.append((row, scorer([row])[0]))
            except Exception as error:
                logger.exception("campaign %s: candidate %s not scored", campaign.slug, row.pk)
                result.failed[row.pk] = f"{type(error).__name__}: {error}"[:500]
    written = [
        row.pk
        for row, score in scored
        if CampaignCandidate.objects.filter(
            pk=row.pk, metric_score__isnull=True, campaign__metric=result.metric
        ).update(metric_score=score.score, metric_uncertainty=score.uncertainty)
    ]
    result.scored.extend(written)
    if written:
        publish_now(
            task_named(ALLOCATION_REDECIDE_TASK),
            campaign_id=campaign.pk,
            campaign_candidate_ids=written,
        )
