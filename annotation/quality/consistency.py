"""Intra-rater consistency of a campaign's test-retest repeats: reads and figures.

A pair is a worker's first rating of a candidate (`Judgment`) and their second, unannounced one
(`RepeatJudgment`, see `annotation.crowd.services.repeats`), per question. Ratings are mapped to their
rank among the question's levels (1..K) and measured with quadratic-weighted Cohen's kappa
(`annotation.quality.retest`) per worker × question. A worker's single figure is the mean of
their per-question kappas.

The campaign's figures summarise the *within-worker* kappas: their mean and median over the
workers with enough pairs, per question and overall (`worker_kappa_mean`, `worker_kappa_median`).
A kappa of the tables pooled across workers (`pooled_kappa`) is kept beside them, labelled as
pooled: pooling measures chance against the crowd's marginals, so the differences *between*
workers (one keeps to the low end, another to the high end) count as reproduced ratings, and it
is not an average worker's consistency (two workers who each use their own end
of the scale and reproduce nothing within it have kappa 0 each and 0.9 pooled:
tests/annotation/quality/test_retest_consistency.py).

A worker with fewer repeated candidates than the `inconsistent_retest` rule's `min_pairs` gets no
kappa shown (None, `enough_pairs` false): a kappa over three pairs is noise. The same threshold
gates the rule, so the page, the API, the command and the rule agree on who has a figure.

Every page, the API (`GET .../quality/retest`), the `retest` command and the dataset card read
`campaign_retest`, so they show the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
from django.db.models import Count
from numpy.typing import NDArray

from annotation.models import AssignmentStatus, Campaign, Participation, Repeat, RepeatJudgment
from annotation.quality.retest import repeat_consistency
from annotation.quality.rules import qc_rules_merge
from annotation.questions import level_values

RULE = "inconsistent_retest"


@dataclass
class RepeatPairs:
    """One row per repeated candidate; `first` / `second` are pairs × questions level ranks
    (1..K), 0 where a question was not answered."""

    participation_ids: NDArray[np.int64]  # the worker table
    worker: NDArray[np.int64]  # index into participation_ids
    first: NDArray[np.int64]
    second: NDArray[np.int64]
    question_keys: list[str]
    categories: list[int]


def _rank(ranks: dict[int, int], values: Any, key: str) -> int:
    """The level rank of `values[key]` (0: not answered or not a level of the question)."""
    value = (values or {}).get(key)
    return ranks.get(value, 0) if isinstance(value, int) else 0


def repeat_pairs_load(
    *, campaign: Campaign, participation_ids: NDArray[np.int64] | list[int] | None = None
) -> RepeatPairs:
    """The repeat pairs of the campaign (of these workers only, in this order, when given)."""
    questions = campaign.questions
    keys = [question["key"] for question in questions]
    ranks = [
        {value: rank + 1 for rank, value in enumerate(sorted(level_values(question)))}
        for question in questions
    ]
    rows = RepeatJudgment.objects.filter(campaign_id=campaign.pk)
    if participation_ids is not None:
        rows = rows.filter(participation_id__in=[int(pk) for pk in participation_ids])
    records = list(
        rows.order_by("id").values_list("participation_id", "values", "original__values")
    )
    if participation_ids is None:
        table = np.unique(np.asarray([record[0] for record in records], dtype=np.int64))
    else:
        table = np.asarray(participation_ids, dtype=np.int64)
    position = {int(pk): index for index, pk in enumerate(table.tolist())}
    first = np.zeros((len(records), len(keys)), dtype=np.int64)
    second = np.zeros((len(records), len(keys)), dtype=np.int64)
    for row, (_worker, repeat_values, original_values) in enumerate(records):
        for column, key in enumerate(keys):
            first[row, column] = _rank(ranks[column], original_values, key)
            second[row, column] = _rank(ranks[column], repeat_values, key)
    return RepeatPairs(
        participation_ids=table,
        worker=np.asarray([position[record[0]] for record in records], dtype=np.int64),
        first=first,
        second=second,
        question_keys=keys,
        categories=[len(rank) for rank in ranks],
    )


@dataclass
class Consistency:
    """Per worker (index into the pair table's workers) and per question."""

    pairs: NDArray[np.int64]  # repeated candidates per worker
    kappa: NDArray[np.float64]  # mean of the worker's per-question kappas (NaN: none defined)
    by_question: dict[str, Any]  # key -> RepeatConsistency


def consistency_compute(pairs: RepeatPairs) -> Consistency:
    workers = len(pairs.participation_ids)
    by_question = {}
    kappas = []
    for column, key in enumerate(pairs.question_keys):
        answered = (pairs.first[:, column] > 0) & (pairs.second[:, column] > 0)
        figures = repeat_consistency(
            worker=pairs.worker[answered],
            first=pairs.first[answered, column],
            second=pairs.second[answered, column],
            workers=workers,
            categories=pairs.categories[column],
        )
        by_question[key] = figures
        kappas.append(figures.kappa)
    stacked = np.vstack(kappas) if kappas else np.full((1, workers), np.nan)
    defined = ~np.isnan(stacked)
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = np.where(defined, stacked, 0.0).sum(axis=0) / defined.sum(axis=0)
    return Consistency(
        pairs=np.bincount(pairs.worker, minlength=workers).astype(np.int64),
        kappa=np.asarray(kappa, dtype=np.float64),
        by_question=by_question,
    )


def worker_retest_figures(
    *, campaign: Campaign, participation_ids: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Repeat pairs and mean kappa of each of these workers, in this order (for the QC rule)."""
    figures = consistency_compute(
        repeat_pairs_load(campaign=campaign, participation_ids=participation_ids)
    )
    return figures.pairs, figures.kappa


def _number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 4)


class WithinWorkerSummary(TypedDict):
    worker_kappa_mean: float | None
    worker_kappa_median: float | None
    workers_with_kappa: int


class RetestQuestion(WithinWorkerSummary):
    key: str
    label: str
    pairs: int
    pooled_kappa: float | None
    exact_agreement: float | None


class RetestWorkerQuestion(TypedDict):
    label: str
    kappa: float | None
    exact_agreement: float | None
    mean_absolute_difference: float | None


class RetestWorker(TypedDict):
    participation_id: int
    platform: str
    external_id: str
    pairs: int
    enough_pairs: bool
    kappa: float | None
    questions: dict[str, RetestWorkerQuestion]


class CampaignRetest(WithinWorkerSummary):
    """`campaign_retest`'s figures (the retest API's payload; the JSON keys are in the order the
    function builds them)."""

    retest_share: float
    retest_min_gap: int
    min_pairs: int
    rule_enabled: bool
    rule_min_kappa: float | None
    repeats_served: int
    repeats_submitted: int
    pairs: int
    workers_with_pairs: int
    workers_with_enough_pairs: int
    pooled_kappa: float | None
    questions: list[RetestQuestion]
    workers: list[RetestWorker]


def retest_min_pairs(*, campaign: Campaign) -> int:
    return int(qc_rules_merge(campaign.qc_rules)[RULE]["min_pairs"])


def within_worker_summary(
    kappas: NDArray[np.float64], enough: NDArray[np.bool_]
) -> WithinWorkerSummary:
    """Mean and median of the workers' own kappas (those with enough pairs and a defined kappa),
    with how many workers they summarise."""
    values = kappas[enough & ~np.isnan(kappas)]
    return {
        "worker_kappa_mean": _number(float(values.mean())) if values.size else None,
        "worker_kappa_median": _number(float(np.median(values))) if values.size else None,
        "workers_with_kappa": int(values.size),
    }


def campaign_retest(*, campaign: Campaign) -> CampaignRetest:
    """The campaign's test-retest figures: settings, how many repeats and pairs, per question the
    mean and median of the workers' own kappas (and the pooled kappa, labelled), and per worker
    (kappa only with enough pairs)."""
    labels = {
        question["key"]: question.get("label") or question["key"] for question in campaign.questions
    }
    min_pairs = retest_min_pairs(campaign=campaign)
    rule = qc_rules_merge(campaign.qc_rules)[RULE]
    pairs = repeat_pairs_load(campaign=campaign)
    figures = consistency_compute(pairs)
    statuses = dict(
        Repeat.objects.filter(campaign_id=campaign.pk)
        .values("status")
        .order_by()
        .annotate(count=Count("id"))
        .values_list("status", "count")
    )
    enough_pairs = figures.pairs >= min_pairs
    questions: list[RetestQuestion] = [
        {
            "key": key,
            "label": labels.get(key, key),
            "pairs": figures.by_question[key].pooled_pairs,
            **within_worker_summary(figures.by_question[key].kappa, enough_pairs),
            "pooled_kappa": _number(figures.by_question[key].pooled_kappa),
            "exact_agreement": _number(figures.by_question[key].pooled_exact_agreement),
        }
        for key in pairs.question_keys
    ]
    pooled = [row["pooled_kappa"] for row in questions if row["pooled_kappa"] is not None]
    workers = _worker_rows(pairs, figures, labels=labels, min_pairs=min_pairs)
    return {
        "retest_share": campaign.retest_share,
        "retest_min_gap": campaign.retest_min_gap,
        "min_pairs": min_pairs,
        "rule_enabled": bool(rule.get("enabled")),
        "rule_min_kappa": rule.get("min_kappa"),
        "repeats_served": sum(statuses.values()),
        "repeats_submitted": statuses.get(AssignmentStatus.SUBMITTED.value, 0),
        "pairs": int(len(pairs.worker)),
        "workers_with_pairs": len(workers),
        "workers_with_enough_pairs": sum(1 for row in workers if row["enough_pairs"]),
        # Over the workers: each worker's own kappa (the mean of their per-question kappas).
        **within_worker_summary(figures.kappa, enough_pairs),
        # Labelled pooled: the mean over the questions of the kappa of the pooled tables.
        "pooled_kappa": round(sum(pooled) / len(pooled), 4) if pooled else None,
        "questions": questions,
        "workers": workers,
    }


def _worker_rows(
    pairs: RepeatPairs, figures: Consistency, *, labels: dict[str, str], min_pairs: int
) -> list[RetestWorker]:
    """Per worker with repeat pairs (kappa only with enough pairs): the most consistent workers
    with enough pairs first, then the others."""
    people = {
        pk: (platform, external_id)
        for pk, platform, external_id in Participation.objects.filter(
            pk__in=pairs.participation_ids.tolist()
        ).values_list("pk", "worker__platform", "worker__external_id")
    }
    workers: list[RetestWorker] = []
    for index, participation_id in enumerate(pairs.participation_ids.tolist()):
        count = int(figures.pairs[index])
        enough = count >= min_pairs
        platform, external_id = people.get(participation_id, ("", ""))
        workers.append(
            {
                "participation_id": participation_id,
                "platform": platform,
                "external_id": external_id,
                "pairs": count,
                "enough_pairs": enough,
                "kappa": _number(figures.kappa[index]) if enough else None,
                "questions": {
                    key: {
                        "label": labels.get(key, key),
                        "kappa": _number(figures.by_question[key].kappa[index]) if enough else None,
                        "exact_agreement": _number(figures.by_question[key].exact_agreement[index]),
                        "mean_absolute_difference": _number(
                            figures.by_question[key].mean_absolute_difference[index]
                        ),
                    }
                    for key in pairs.question_keys
                },
            }
        )
    workers.sort(
        key=lambda row: (
            not row["enough_pairs"],
            row["kappa"] if row["kappa"] is not None else 2.0,
            row["participation_id"],
        )
    )
    return workers


def worker_retest(*, campaign: Campaign, participation_id: int) -> RetestWorker | None:
    """One worker's row of `campaign_retest` (None when they have no repeat pair)."""
    for row in campaign_retest(campaign=campaign)["workers"]:
        if row["participation_id"] == participation_id:
            return row
    return None


def retest_release_facts(*, campaign_ids: list[int]) -> list[dict[str, Any]]:
    """Per campaign (by slug) that served repeats: the test-retest settings and consistency, for
    a release's card and manifest (no worker is named)."""
    facts = []
    campaigns = Campaign.objects.filter(pk__in=campaign_ids).order_by("slug")
    for campaign in campaigns:
        if not campaign.retest_share and not Repeat.objects.filter(campaign=campaign).exists():
            continue
        figures = campaign_retest(campaign=campaign)
        facts.append(
            {
                "campaign": campaign.slug,
                "retest_share": figures["retest_share"],
                "retest_min_gap": figures["retest_min_gap"],
                "repeats_submitted": figures["repeats_submitted"],
                "pairs": figures["pairs"],
                "workers_with_pairs": figures["workers_with_pairs"],
                "workers_with_enough_pairs": figures["workers_with_enough_pairs"],
                "min_pairs": figures["min_pairs"],
                "worker_kappa_mean": figures["worker_kappa_mean"],
                "worker_kappa_median": figures["worker_kappa_median"],
                "workers_with_kappa": figures["workers_with_kappa"],
                "pooled_kappa": figures["pooled_kappa"],
                "questions": {
                    row["key"]: {
                        "pairs": row["pairs"],
                        "worker_kappa_mean": row["worker_kappa_mean"],
                        "worker_kappa_median": row["worker_kappa_median"],
                        "workers_with_kappa": row["workers_with_kappa"],
                        "pooled_kappa": row["pooled_kappa"],
                        "exact_agreement": row["exact_agreement"],
                    }
                    for row in figures["questions"]
                },
            }
        )
    return facts
