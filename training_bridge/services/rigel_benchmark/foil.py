"""FOIL in an evaluation: the runs score each pair's caption and foil in the settings they were
trained in, the standard metrics score the same pairs, and the result gives each one's accuracy
(per video for ActivityNet-FOIL's paragraphs, per pair otherwise) beside the paper's figure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from training_bridge.metrics.plugins import (
    CaptionMetric,
    MetricItem,
    Video,
    available_metrics,
    parse_settings,
    score_metrics,
)
from training_bridge.rigel.benchmark import PAPER_FOIL_ACCURACY, REFERENCE_FREE
from training_bridge.rigel.foil import ACTIVITYNET_FOIL, NOUN_SWAP
from training_bridge.services.metric_benchmark import _clip_videos
from training_bridge.services.rigel_benchmark.campaign import CampaignData
from training_bridge.services.rigel_benchmark.plan import (
    FOIL_SETTINGS,
    ProtocolPlan,
    foil_key,
    mismatch_text,
)

FOIL_BENCHMARK_LABELS = {
    ACTIVITYNET_FOIL: "ActivityNet-FOIL (paragraph protocol, as published)",
    NOUN_SWAP: "Lepus noun-swap foils (our own benchmark; no published figure)",
    "pairs": "FOIL pairs of a user's file",
    "paragraphs": "FOIL paragraphs of a user's file",
}
PAPER_FOIL_SOURCE = (
    "Rigel paper (seed 000), Table 2, ActivityNet-FOIL column, 'Ours' (Qwen3-VL-2B); the target, "
    "not a figure this repository reproduced"
)
# setting -> "caption" or "foil" -> run key -> one score per chosen pair
FoilScores = dict[str, dict[str, dict[str, list[float]]]]


class FoilRow(TypedDict):
    """A run's or a metric's FOIL accuracy (%) in one setting."""

    accuracy: float | None
    unavailable: NotRequired[str]  # why a metric could not score
    protocol_mismatch: NotRequired[str]  # the setting a mismatched run was trained in


class PublishedAccuracy(TypedDict):
    accuracy: float
    source: str


class FoilSetting(TypedDict):
    """One FOIL setting (reference-free or reference-based) of the result."""

    videos: int | None  # paragraph benchmarks: the videos scored
    published: PublishedAccuracy | None
    pairs: int
    rows: dict[str, FoilRow]
    order: list[str]
    notes: list[str]


class FoilResult(TypedDict):
    """The result's `foil` part."""

    benchmark: str
    benchmark_label: str
    source: str
    seed: int | None
    pairs: int
    videos: int | None
    skipped_clips: dict[str, int]
    corpus_nouns: list[str]
    rule: str
    settings: dict[str, FoilSetting]
    swaps: list[dict[str, object]]


def score_foils(
    scorer: Any,
    data: CampaignData,
    foil_set: Any,
    key: str,
    foil_scores: FoilScores,
    on_progress: Callable[[int, int], None],
    foil_settings: Sequence[str] = FOIL_SETTINGS,
) -> None:
    from training_bridge.rigel.benchmark import benchmark_record

    pairs = foil_set.pairs
    total = 2 * len(pairs) * len(foil_settings)
    step = 0
    for setting in foil_settings:
        free = setting == REFERENCE_FREE
        chosen, _ = foil_units(foil_set, free=free)
        for which in ("caption", "foil"):
            records = [
                benchmark_record(
                    data.clip_media[pair.clip_id],
                    pair.caption if which == "caption" else pair.foil,
                    () if free else pair.references,
                    str(index),
                )
                for index, pair in enumerate(chosen)
            ]
            scores = scorer.score(records, reference_free=free) if records else []
            foil_scores[setting][which][key] = [float(value) for value in scores]
            step += len(pairs)
            on_progress(step, total)


def foil_units(foil_set: Any, *, free: bool) -> tuple[list[Any], list[Any]]:
    """The pairs a FOIL setting scores, and its paragraphs re-indexed over them. Reference-free:
    every pair. Reference-based: the pairs with a reference, and of a paragraph benchmark the
    videos all of whose sentences have one (a paragraph is scored whole or not at all)."""
    from training_bridge.rigel.foil import Paragraph

    if free:
        return list(foil_set.pairs), list(foil_set.paragraphs)
    if not foil_set.paragraphs:
        return [pair for pair in foil_set.pairs if pair.references], []
    chosen: list[Any] = []
    paragraphs = []
    for paragraph in foil_set.paragraphs:
        sentences = foil_set.pairs[paragraph.first : paragraph.last]
        if all(pair.references for pair in sentences):
            paragraphs.append(Paragraph(paragraph.video, len(chosen), len(chosen) + len(sentences)))
            chosen.extend(sentences)
    return chosen, paragraphs


def foil_set_accuracy(captions: Any, foils: Any, paragraphs: Sequence[Any]) -> float | None:
    """Per video for a paragraph benchmark, per pair otherwise (`rigel.foil`)."""
    from training_bridge.rigel.foil import foil_accuracy, paragraph_accuracy

    if paragraphs:
        return paragraph_accuracy(captions, foils, paragraphs)
    return foil_accuracy(captions, foils)


def foil_result(
    foil_set: Any,
    foil_scores: FoilScores,
    metrics: Sequence[str],
    settings: Mapping[str, str] | None,
    data: CampaignData,
    plan: ProtocolPlan,
) -> FoilResult:
    """The FOIL part of the result: per setting, the runs' and the standard metrics' accuracy."""
    videos = _clip_videos(
        [data.clip_pks[pair.clip_id] for pair in foil_set.pairs],
        frames=parse_settings(settings).frames,
    )
    wanted = list(dict.fromkeys(metrics))
    available, reasons = available_metrics(settings, wanted)
    table = {
        setting: _foil_setting(
            foil_set, foil_scores[setting], setting, wanted, available, reasons, videos, data, plan
        )
        for setting in FOIL_SETTINGS
    }
    return FoilResult(
        benchmark=foil_set.benchmark,
        benchmark_label=FOIL_BENCHMARK_LABELS.get(foil_set.benchmark, foil_set.benchmark),
        source=foil_set.source,
        seed=foil_set.seed,
        pairs=len(foil_set.pairs),
        videos=len(foil_set.paragraphs) or None,
        skipped_clips=foil_set.skipped,
        corpus_nouns=foil_set.corpus_nouns,
        rule=(
            "a video is right when its correct paragraph (the mean of its sentences' scores) "
            "scores strictly higher than its foil paragraph"
            if foil_set.paragraphs
            else "right when the correct caption scores strictly higher than its foil"
        ),
        settings=table,
        swaps=[pair.swap() for pair in foil_set.pairs],
    )


def _foil_setting(
    foil_set: Any,
    run_scores: dict[str, dict[str, list[float]]],
    setting: str,
    wanted: Sequence[str],
    available: Mapping[str, CaptionMetric],
    reasons: Mapping[str, str],
    videos: Mapping[int, Video],
    data: CampaignData,
    plan: ProtocolPlan,
) -> FoilSetting:
    """One FOIL setting's block: the runs' rows, then the standard metrics', and the notes."""
    free = setting == REFERENCE_FREE
    chosen, paragraphs = foil_units(foil_set, free=free)
    captions, foils = run_scores["caption"], run_scores["foil"]
    rows: dict[str, FoilRow] = {
        name: FoilRow(accuracy=foil_set_accuracy(captions[name], foils[name], paragraphs))
        for name in captions
    }
    # captions and foils in one call (one METEOR start; CIDEr's document frequencies are
    # unchanged by listing every reference set twice)
    items = [
        MetricItem(
            text,
            () if free else tuple(pair.references),
            videos.get(data.clip_pks[pair.clip_id]),
        )
        for text, pair in [(p.caption, p) for p in chosen] + [(p.foil, p) for p in chosen]
    ]
    scores, failed = score_metrics(available, items) if chosen else ({}, {})
    count = len(chosen)
    for metric in wanted:
        why = reasons.get(metric) or failed.get(metric)
        if why or metric not in scores:
            rows[metric] = FoilRow(accuracy=None, unavailable=why or "no pair to score")
        else:
            values = scores[metric]
            rows[metric] = FoilRow(
                accuracy=foil_set_accuracy(values[:count], values[count:], paragraphs)
            )
    for pair in plan.mismatches:
        if pair["protocol"] == foil_key(setting):
            rows[f"run:{pair['run']}"]["protocol_mismatch"] = pair["trained"]
    return FoilSetting(
        videos=len(paragraphs) if paragraphs else None,
        published=(
            PublishedAccuracy(accuracy=PAPER_FOIL_ACCURACY[setting], source=PAPER_FOIL_SOURCE)
            if foil_set.benchmark == ACTIVITYNET_FOIL
            else None
        ),
        pairs=len(chosen),
        rows=rows,
        order=list(rows),
        notes=_foil_notes(foil_set, setting, chosen, paragraphs, plan),
    )


def _foil_notes(
    foil_set: Any,
    setting: str,
    chosen: Sequence[Any],
    paragraphs: Sequence[Any],
    plan: ProtocolPlan,
) -> list[str]:
    notes = [
        mismatch_text(pair) for pair in plan.mismatches if pair["protocol"] == foil_key(setting)
    ]
    for pair in plan.skipped:
        if pair["protocol"] == foil_key(setting):
            notes.append(
                f"run {pair['run']} was trained {pair['trained']}: not scored in this setting"
            )
    if setting != REFERENCE_FREE and len(chosen) < len(foil_set.pairs):
        notes.append(
            f"{len(foil_set.paragraphs) - len(paragraphs)} video(s) with a sentence without "
            "a reference are scored reference-free only"
            if foil_set.paragraphs
            else f"{len(foil_set.pairs) - len(chosen)} pair(s) without another reference are "
            "scored reference-free only"
        )
    if paragraphs:
        notes.append(
            f"{len(paragraphs)} videos: each sentence scored on its segment, a paragraph's "
            "score the mean of its sentences', a video right when its correct paragraph "
            "scores strictly higher than its foil paragraph"
        )
    return notes
