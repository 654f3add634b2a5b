"""Fit a caption metric on a release's training split and evaluate it on its test split, refusing
leakage, and store the fitted parameters with the figures (`models.MetricEvaluation`).

Leakage, as `rigel_benchmark.refuse_leakage` refuses it for a trained run: the figures of a fitted
metric are only honest on clips it was not fitted on, so the two splits must share no clip (a
release splits by clip, so they never do unless the records were changed by hand) and must be two
different splits. The check reads the release's records before anything is scored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from training_bridge.metrics.benchmark import PROTOCOL_FRAMES
from training_bridge.metrics.fitting import fit_and_evaluate
from training_bridge.metrics.plugins import CaptionMetric, available_metrics, parse_settings
from training_bridge.models import MetricEvaluation
from training_bridge.services.metric_benchmark import MetricBenchmarkError, release_benchmark_set


def split_clip_leakage(*, release_id: int, train_split: str, test_split: str) -> dict[str, int]:
    """How many clips the two splits of the release share (and how many each has); raises
    MetricBenchmarkError when they share any, or name the same split, or one does not exist."""
    from export import models as export_models

    release = export_models.Release.objects.filter(pk=release_id).first()
    if release is None:
        raise MetricBenchmarkError(f"release {release_id} does not exist")
    names = list(release.split_names)
    unknown = [split for split in (train_split, test_split) if split not in names]
    if unknown:
        raise MetricBenchmarkError(
            f"release {release_id} has no split {', '.join(unknown)} (it has {', '.join(names)})"
        )
    if train_split == test_split:
        raise MetricBenchmarkError(
            f"leakage: the metric would be fitted and evaluated on the same split ({train_split})"
        )
    records = export_models.ReleaseRecord.objects.filter(release_id=release_id)

    def clips(split: str) -> set[int]:
        return set(records.filter(split=names.index(split)).values_list("clip_id", flat=True))

    train_clips, test_clips = clips(train_split), clips(test_split)
    shared = len(train_clips & test_clips)
    if shared:
        raise MetricBenchmarkError(
            f"leakage: {shared} of the {len(test_clips)} clips of the {test_split} split are also "
            f"in the {train_split} split. A metric is evaluated only on clips it was not fitted on."
        )
    return {"shared_clips": 0, "train_clips": len(train_clips), "test_clips": len(test_clips)}


def metric_evaluation_fit(
    *,
    release_id: int,
    metric: str,
    settings: Mapping[str, str] | None = None,
    train_split: str = "train",
    test_split: str = "test",
    reference_count: int | None = None,
    created_by: Any = None,
    plugin: CaptionMetric | None = None,
    progress: Callable[[str], None] | None = None,
) -> MetricEvaluation:
    """Fit `metric` (a registry name) on `train_split`, evaluate on `test_split`, store and return
    the `MetricEvaluation`. `plugin` replaces the registry's plug-in (a caller that built its own,
    e.g. Redemption Score with a generator of its own); it must carry the same name."""
    try:
        parsed = parse_settings(settings)
    except ValueError as error:
        raise MetricBenchmarkError(str(error)) from error
    leakage = split_clip_leakage(
        release_id=release_id, train_split=train_split, test_split=test_split
    )
    if plugin is None:
        try:
            available, unavailable = available_metrics(settings, [metric])
        except ValueError as error:
            raise MetricBenchmarkError(str(error)) from error
        if metric in unavailable:
            raise MetricBenchmarkError(f"{metric} cannot run here: {unavailable[metric]}")
        plugin = available[metric]
    elif plugin.name != metric:
        raise MetricBenchmarkError(f"the plug-in given is {plugin.name}, not {metric}")
    frames = parsed.frames if "frames" in (settings or {}) else PROTOCOL_FRAMES["default"]
    train = release_benchmark_set(release_id=release_id, splits=[train_split], frames=frames)
    test = release_benchmark_set(release_id=release_id, splits=[test_split], frames=frames)
    if progress is not None:
        progress(f"fitting {metric} on {len(train.candidates)} candidates")
    try:
        fit = fit_and_evaluate(plugin, train, test, reference_count=reference_count)
    except ValueError as error:
        raise MetricBenchmarkError(str(error)) from error
    return MetricEvaluation.objects.create(
        release_id=release_id,
        metric=metric,
        train_split=train_split,
        test_split=test_split,
        reference_count=reference_count,
        metric_settings=dict(settings or {}),
        fitted=fit.fitted,
        result={**fit.result, "leakage": leakage},
        created_by=created_by,
    )
