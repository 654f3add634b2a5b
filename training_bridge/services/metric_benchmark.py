"""Standard caption metrics against human scores for a campaign or a release, without training.

Reads (selectors) gather one `BenchmarkSet` — candidate texts, their references in position order,
the aggregate human score of each candidate and, when the campaign holds them, the per-rater
scores — and `metric_benchmark_compute` turns it into the table of `training_bridge.metrics`.

Human score of a candidate:
- a campaign: `CampaignCandidate.overall` (the aggregate written by the aggregation service, expert
  resolutions included); where it has not been computed yet (e.g. straight after an import), the mean
  of the overall values of the candidate's kept judgments;
- a release: the `overall` of each `ReleaseRecord` (what the release's files carry).
The overall value of one judgment is its answer to the campaign's `overall_question_key`, else the
mean of its answers to the campaign's questions.

Video: each candidate carries its clip's sampled frames (`Clip.frames_key`, else frames decoded
from `Clip.video_key`; the `frames` setting, uniformly — by default 10 under the emscore protocol,
as the EMScore authors' VATEX-EVAL run, else 8) for the metrics that look at the video (CLIP-S,
EMScore...); they are read only when such a metric runs. A clip with neither has no video, and
those metrics are reported unavailable for the set.

Under the emscore protocol the EMScore rows also say where their IDF came from (`idf`) and how
many frames they saw (`frames`): the authors take the IDF from the VATEX training captions, which
the user supplies (`emscore_idf_corpus`); without it the row says loudly that it used the scored
batch instead, which is not the published protocol.

Rater columns (for `--protocol emscore`) are the campaign's imported rater slots
(`Platform.IMPORTED` workers, e.g. `vatex-eval:slot-1..3`), ordered by their external id; every
candidate must have one kept judgment from each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db.models import QuerySet

from annotation.models import Campaign, CampaignCandidate, Judgment, Platform
from datasets_app.models import Clip, ReferenceCaption
from training_bridge.metrics.benchmark import (
    PROTOCOL_FRAMES,
    BenchmarkSet,
    Protocol,
    correlation_table,
)
from training_bridge.metrics.plugins import TABLE_METRICS, Video, parse_settings


class MetricBenchmarkError(ValueError):
    """The requested benchmark cannot be computed from the data (explained in the message)."""


@dataclass(frozen=True)
class _Item:
    campaign_candidate_id: int
    campaign_id: int
    clip_id: int
    text: str
    overall: float | None


def judgment_overall(values: dict[str, float], *, campaign: Campaign) -> float | None:
    """The overall value of one judgment's answers (None when it answered nothing relevant)."""
    key = campaign.overall_question_key
    if key:
        value = values.get(key)
        return None if value is None else float(value)
    answers = [float(values[k]) for k in campaign.question_keys if values.get(k) is not None]
    return sum(answers) / len(answers) if answers else None


def _references_by_clip(clip_ids: Iterable[int]) -> dict[int, list[str]]:
    references: dict[int, list[str]] = defaultdict(list)
    rows = (
        ReferenceCaption.objects.filter(clip_id__in=set(clip_ids))
        .order_by("clip_id", "position")
        .values_list("clip_id", "text")
    )
    for clip_id, text in rows.iterator(chunk_size=5000):
        references[clip_id].append(text)
    return references


def _clip_videos(clip_ids: Iterable[int], *, frames: int) -> dict[int, Video]:
    """{clip id: its video (lazy)} for the clips that have sampled frames or a processed MP4."""
    rows = (
        Clip.objects.filter(pk__in=set(clip_ids))
        .exclude(frames_key="", video_key="")
        .values_list("pk", "vatex_id", "frames_key", "video_key", "duration")
    )
    return {
        clip_id: Video(vatex_id, _frame_loader(vatex_id, frames_key, video_key, duration, frames))
        for clip_id, vatex_id, frames_key, video_key, duration in rows
    }


def _frame_loader(
    vatex_id: str, frames_key: str, video_key: str, duration: float | None, frames: int
) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        # The training data loader reads frames the same way for Rigel (JPEGs, else the MP4).
        from training_bridge.rigel.data import ExampleLoader, ReleaseRecord
        from training_bridge.store import DjangoStore

        record = ReleaseRecord(
            clip_id=vatex_id,
            candidate_id="",
            text="",
            references=(),
            normalized=0.0,
            training_class=1,
            video_key=video_key,
            frames_key=frames_key,
            duration=duration,
        )
        decoded, _, _ = ExampleLoader(DjangoStore(), frames=frames, keep_clips=1).clip_video(record)
        return np.asarray(decoded)

    return load


def _kept_judgments(
    campaign_candidate_ids: Sequence[int], campaigns: dict[int, Campaign]
) -> tuple[dict[int, list[float]], dict[int, dict[str, float]]]:
    """Per campaign candidate: overall values of its kept judgments, and those of imported raters
    by rater external id."""
    all_values: dict[int, list[float]] = defaultdict(list)
    by_rater: dict[int, dict[str, float]] = defaultdict(dict)
    rows = (
        Judgment.objects.kept()
        .filter(campaign_candidate_id__in=campaign_candidate_ids)
        .order_by("id")
        .values_list(
            "campaign_candidate_id",
            "campaign_id",
            "values",
            "participation__worker__platform",
            "participation__worker__external_id",
        )
    )
    for candidate_id, campaign_id, values, platform, external_id in rows.iterator(chunk_size=5000):
        value = judgment_overall(values or {}, campaign=campaigns[campaign_id])
        if value is None:
            continue
        all_values[candidate_id].append(value)
        if platform == Platform.IMPORTED:
            if external_id in by_rater[candidate_id]:
                raise MetricBenchmarkError(
                    f"rater {external_id} judged campaign candidate {candidate_id} twice"
                )
            by_rater[candidate_id][external_id] = value
    return all_values, by_rater


def _benchmark_set(
    items: list[_Item],
    campaigns: dict[int, Campaign],
    *,
    with_raters: bool,
    fallback_to_judgments: bool,
    frames: int = 8,
) -> BenchmarkSet:
    if not items:
        raise MetricBenchmarkError("no candidates with human scores to compare against")
    references = _references_by_clip(item.clip_id for item in items)
    clip_videos = _clip_videos((item.clip_id for item in items), frames=frames)
    judged, by_rater = (
        _kept_judgments([item.campaign_candidate_id for item in items], campaigns)
        if with_raters or fallback_to_judgments
        else ({}, {})
    )
    candidates, reference_lists, human, kept_ids = [], [], [], []
    videos: list[Video | None] = []
    for item in items:
        overall = item.overall
        if overall is None and fallback_to_judgments and judged.get(item.campaign_candidate_id):
            values = judged[item.campaign_candidate_id]
            overall = sum(values) / len(values)
        if overall is None:
            continue
        if not references.get(item.clip_id):
            raise MetricBenchmarkError(
                f"clip {item.clip_id} of campaign candidate {item.campaign_candidate_id} "
                "has no reference caption"
            )
        candidates.append(item.text)
        reference_lists.append(references[item.clip_id])
        human.append(overall)
        kept_ids.append(item.campaign_candidate_id)
        videos.append(clip_videos.get(item.clip_id))
    if len(candidates) < 2:
        raise MetricBenchmarkError(
            f"{len(candidates)} candidate(s) with a human score; at least two are needed"
        )
    rater_scores = None
    rater_names: list[str] = []
    if with_raters:
        rater_names = sorted({name for row in by_rater.values() for name in row})
        if not rater_names:
            raise MetricBenchmarkError(
                "the emscore protocol needs per-rater scores, and these candidates have no "
                "judgments from imported rater slots"
            )
        rater_scores = np.full((len(kept_ids), len(rater_names)), np.nan)
        for row, candidate_id in enumerate(kept_ids):
            for column, name in enumerate(rater_names):
                value = by_rater.get(candidate_id, {}).get(name)
                if value is not None:
                    rater_scores[row, column] = value
        missing = int(np.isnan(rater_scores).any(axis=1).sum())
        if missing:
            raise MetricBenchmarkError(
                f"{missing} candidate(s) lack a kept judgment from one of the rater slots "
                f"{', '.join(rater_names)}; the emscore protocol needs a complete rater matrix"
            )
    return BenchmarkSet(
        candidates=candidates,
        references=reference_lists,
        human=np.array(human, dtype=np.float64),
        rater_scores=rater_scores,
        rater_names=rater_names,
        videos=videos,
        keys=kept_ids,
    )


def campaign_benchmark_set(
    *, campaign: Campaign, with_raters: bool = False, frames: int = 8
) -> BenchmarkSet:
    """The campaign's model-output candidates (no controls, none dropped by an expert) that have a
    human score, with their clips' references."""
    rows: QuerySet[CampaignCandidate] = CampaignCandidate.objects.filter(
        campaign=campaign, is_control=False, dropped=False
    ).order_by("clip_id", "candidate__position", "id")
    items = [
        _Item(row_id, campaign.pk, clip_id, text, overall)
        for row_id, clip_id, text, overall in rows.values_list(
            "id", "clip_id", "candidate__text", "overall"
        ).iterator(chunk_size=5000)
    ]
    return _benchmark_set(
        items,
        {campaign.pk: campaign},
        with_raters=with_raters,
        fallback_to_judgments=True,
        frames=frames,
    )


def release_benchmark_set(
    *,
    release_id: int,
    campaign: Campaign | None = None,
    splits: Sequence[str] | None = None,
    with_raters: bool = False,
    frames: int = 8,
) -> BenchmarkSet:
    """The records of a succeeded release (optionally only some splits, or only the records that
    came from one campaign), with the overall score the release carries."""
    # Looked up at run time: the releases models live in `export`, which this module must not
    # require at import time.
    from export import models as export_models

    release_model = getattr(export_models, "Release", None)
    record_model = getattr(export_models, "ReleaseRecord", None)
    if release_model is None or record_model is None:
        raise MetricBenchmarkError("releases are not available in this installation")
    release = release_model.objects.filter(pk=release_id).first()
    if release is None:
        raise MetricBenchmarkError(f"release {release_id} does not exist")
    if not release.is_published:
        raise MetricBenchmarkError(
            f"release {release_id} has not succeeded (status {release.status}); only a finished "
            "release has records to evaluate"
        )
    records = record_model.objects.filter(release_id=release_id)
    if splits:
        names = list(release.split_names)
        unknown = [split for split in splits if split not in names]
        if unknown:
            raise MetricBenchmarkError(
                f"release {release_id} has no split {', '.join(unknown)} (it has {', '.join(names)})"
            )
        records = records.filter(split__in=[names.index(split) for split in splits])
    candidate_rows = {
        row_id: (campaign_id, text)
        for row_id, campaign_id, text in CampaignCandidate.objects.filter(
            pk__in=records.values("campaign_candidate_id")
        ).values_list("id", "campaign_id", "candidate__text")
    }
    items = []
    for record_candidate, clip_id, overall in records.order_by(
        "clip_id", "campaign_candidate_id"
    ).values_list("campaign_candidate_id", "clip_id", "overall"):
        row = candidate_rows.get(record_candidate)
        if row is None:
            raise MetricBenchmarkError(
                f"release {release_id} refers to campaign candidate {record_candidate}, "
                "which no longer exists"
            )
        if campaign is not None and row[0] != campaign.pk:
            continue
        items.append(_Item(record_candidate, row[0], clip_id, row[1], float(overall)))
    campaigns = {
        c.pk: c for c in Campaign.objects.filter(pk__in={item.campaign_id for item in items})
    }
    return _benchmark_set(
        items, campaigns, with_raters=with_raters, fallback_to_judgments=False, frames=frames
    )


def metric_benchmark_compute(
    *,
    campaign: Campaign | None = None,
    release_id: int | None = None,
    splits: Sequence[str] | None = None,
    reference_count: int | None = None,
    protocol: Protocol = "default",
    metrics: Sequence[str] = TABLE_METRICS,
    settings: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    scored: Callable[[str, Any], None] | None = None,
) -> tuple[dict[str, dict[str, float | str | None]], BenchmarkSet]:
    """The correlation table (x100) of the metrics of the registry (`metrics.plugins`) against the
    human scores of a campaign or a release (restricted to `campaign` when both are given), and the
    set it was computed on. `settings` are the plug-ins' (e.g. {"clip_model": path}); a metric
    that cannot run keeps its row with the reason."""
    with_raters = protocol == "emscore"
    try:
        parsed = parse_settings(settings)
    except ValueError as error:
        raise MetricBenchmarkError(str(error)) from error
    frames = parsed.frames if "frames" in (settings or {}) else PROTOCOL_FRAMES[protocol]
    if release_id is not None:
        benchmark = release_benchmark_set(
            release_id=release_id,
            campaign=campaign,
            splits=splits,
            with_raters=with_raters,
            frames=frames,
        )
    elif campaign is not None:
        if splits:
            raise MetricBenchmarkError("splits belong to releases; give a release")
        benchmark = campaign_benchmark_set(
            campaign=campaign, with_raters=with_raters, frames=frames
        )
    else:
        raise MetricBenchmarkError("give a campaign, a release, or both")
    if progress is not None:
        progress(f"{len(benchmark.candidates)} candidates")
    table = correlation_table(
        benchmark,
        reference_count=reference_count,
        protocol=protocol,
        metrics=metrics,
        settings={**(settings or {}), "frames": str(frames)},
        progress=progress,
        scored=scored,
    )
    if protocol == "emscore":
        for name in ("emscore", "emscore_ref"):
            if name in table and not table[name].get("unavailable"):
                table[name].update(emscore_protocol_notes(parsed.emscore_idf_corpus, frames))
    return table, benchmark


EMSCORE_BATCH_IDF_WARNING = (
    "batch: WARNING, IDF from the scored captions, not the VATEX training captions of the "
    "EMScore authors' VATEX-EVAL protocol (give --emscore-idf-corpus PATH)"
)


def emscore_protocol_notes(corpus: str | None, frames: int) -> dict[str, str | int]:
    """What an EMScore row under the emscore protocol says about its IDF and frames."""
    return {
        "idf": f"corpus: {corpus}" if corpus else EMSCORE_BATCH_IDF_WARNING,
        "frames": frames,
    }
