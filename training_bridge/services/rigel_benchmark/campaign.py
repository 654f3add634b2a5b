"""The benchmark side of an evaluation: a campaign's candidates, references and clip media, and the
leakage check (a benchmark clip in a run's train or validation split refuses the evaluation)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from annotation.models import Campaign, CampaignCandidate
from datasets_app.models import Clip, ReferenceCaption
from training_bridge.metrics.benchmark import BenchmarkSet
from training_bridge.models import TrainingRun
from training_bridge.rigel.benchmark import BenchmarkClip
from training_bridge.services.metric_benchmark import MetricBenchmarkError, campaign_benchmark_set
from training_bridge.services.rigel_benchmark.plan import RigelEvaluationError


@dataclass
class CampaignData:
    """A campaign's candidates (correlation protocols) and clips (FOIL)."""

    benchmark: BenchmarkSet | None  # None when only FOIL was asked
    clips: list[BenchmarkClip]  # one per candidate of `benchmark`
    clip_references: dict[str, list[str]]  # clip id -> references in position order
    clip_media: dict[str, BenchmarkClip]
    corpus: list[str]  # every caption of the campaign (FOIL's nouns)
    clip_pks: dict[str, int]  # clip id -> Clip row id


def campaign_data(
    *, campaign: Campaign, correlation: str, need_benchmark: bool, frames: int = 8
) -> CampaignData:
    rows = list(
        CampaignCandidate.objects.filter(campaign=campaign, is_control=False, dropped=False)
        .order_by("clip_id", "candidate__position", "id")
        .values_list("id", "clip_id", "candidate__text")
    )
    if not rows:
        raise RigelEvaluationError(f"campaign {campaign.slug} has no candidates")
    clip_of = {row_id: clip_pk for row_id, clip_pk, _ in rows}
    clip_rows = {clip.pk: clip for clip in Clip.objects.filter(pk__in=set(clip_of.values()))}
    references: dict[str, list[str]] = {clip.vatex_id: [] for clip in clip_rows.values()}
    for clip_pk, text in (
        ReferenceCaption.objects.filter(clip_id__in=clip_rows)
        .order_by("clip_id", "position")
        .values_list("clip_id", "text")
    ):
        references[clip_rows[clip_pk].vatex_id].append(text)
    media = {
        clip.vatex_id: BenchmarkClip(
            clip_id=clip.vatex_id,
            frames_key=clip.frames_key or "",
            video_key=clip.video_key or "",
            duration=clip.duration,
            modality=clip.modality,
            image_key=clip.image_key or "",
        )
        for clip in clip_rows.values()
    }
    benchmark = None
    clips: list[BenchmarkClip] = []
    if need_benchmark:
        try:
            benchmark = campaign_benchmark_set(
                campaign=campaign, with_raters=correlation == "emscore", frames=frames
            )
        except MetricBenchmarkError as error:
            hint = (
                " (or evaluate against each candidate's aggregate score: --correlation default)"
                if correlation == "emscore"
                else ""
            )
            raise RigelEvaluationError(f"{error}{hint}") from error
        clips = [media[clip_rows[clip_of[key]].vatex_id] for key in benchmark.keys]
    corpus = [text for _, _, text in rows] + [t for refs in references.values() for t in refs]
    clip_pks = {clip.vatex_id: clip.pk for clip in clip_rows.values()}
    return CampaignData(benchmark, clips, references, media, corpus, clip_pks)


def check_media(clips: Sequence[BenchmarkClip]) -> None:
    missing = sorted(
        {
            clip.clip_id
            for clip in clips
            if not (clip.frames_key or clip.video_key or clip.image_key)
        }
    )
    if missing:
        raise RigelEvaluationError(
            f"{len(missing)} benchmark clip(s) have no processed video or frames (e.g. "
            f"{', '.join(missing[:3])}); ingest their videos first"
        )


def run_leakage(*, run: TrainingRun, clip_ids: set[str]) -> dict[str, int]:
    """How many of these clips are in each split of the run's release."""
    from training_bridge.rigel.data import available_splits, read_split
    from training_bridge.services.runs import training_run_spec
    from training_bridge.store import DjangoStore

    store = DjangoStore()
    prefix = training_run_spec(run=run).release_prefix
    counts = {}
    for split in available_splits(store, prefix):
        in_split = {record.clip_id for record in read_split(store, prefix, split)}
        counts[split] = len(in_split & clip_ids)
    return counts


def refuse_leakage(runs: Sequence[TrainingRun], clip_ids: set[str]) -> dict[str, dict[str, int]]:
    """Per run, the benchmark clips in each split of its release; raises when any is in train or
    validation (a test-split overlap is fine: that is what the test split is for)."""
    leakage = {}
    problems = []
    for run in runs:
        counts = run_leakage(run=run, clip_ids=clip_ids)
        leakage[str(run.pk)] = counts
        seen = counts.get("train", 0) + counts.get("validation", 0)
        if seen:
            problems.append(
                f"run {run.pk}: {seen} of the {len(clip_ids)} benchmark clips are in its release's "
                f"train ({counts.get('train', 0)}) or validation ({counts.get('validation', 0)}) "
                "split"
            )
    if problems:
        raise RigelEvaluationError(
            "leakage: " + "; ".join(problems) + ". A run is evaluated only on clips it was neither "
            "trained nor selected on."
        )
    return leakage
