"""Every caption metric of an evaluation table behind one small interface, and the registry that
says which of them can run here.

    from training_bridge.metrics.plugins import MetricItem, Video, available_metrics, score_metrics

    metrics, unavailable = available_metrics({"clip_model": "/models/clip-vit-b-32"})
    # metrics: {name: CaptionMetric} that can run; unavailable: {name: why not}, nothing dropped
    items = [MetricItem("a man plays guitar", ("a man is playing a guitar",), Video.of("clip-1", frames))]
    scores, failed = score_metrics(metrics, items)
    # scores: {name: np.ndarray of len(items)}; failed: {name: why} (weights that would not load,
    # items without the video or references the metric needs)

The contract of a metric (`CaptionMetric`; it and the item types live in interface.py, below the
metrics, and are re-exported here):

- `name` (the table key, e.g. "cider", "clipscore"), `label` (for people, e.g. "CLIP-S");
- `needs_references`, `needs_video`: what every item must carry for it to score;
- `score(items) -> list[float]`: one score per item, scored as ONE batch — CIDEr-D takes its IDF
  and EMScore its token IDF from the whole batch, so score a whole evaluation set in one call.
  It raises `MetricUnavailable` when its runtime or weights turn out missing while scoring.

An item (`MetricItem`) holds the candidate, its references (may be empty) and optionally a `Video`:
a key naming the clip (items of one clip share it, so each video is embedded once) and a loader of
its sampled frames, uint8 (T, H, W, 3) RGB.

`available_metrics(settings, names)` builds the requested metrics (default: `TABLE_METRICS`) from
the settings (`--set key=value` on the command line); a metric that cannot run is returned with the
reason instead — never silently left out. It loads no weights (that happens on the first `score`)
and NOTHING is downloaded: weights come from a local directory or a model id already in the local
Hugging Face cache. Settings (environment fallback in brackets):

| key | meaning |
|---|---|
| `clip_model` [`LEPUS_CLIP_MODEL`] | CLIP for CLIP-S, RefCLIP-S, EMScore: a transformers checkpoint directory or a cached model id |
| `lclip_model` [`LEPUS_LCLIP_MODEL`] | the L-CLIP checkpoint for L-CLIPScore (same format) |
| `clip_prompt` | text put before every caption for CLIP-S/RefCLIP-S/L-CLIPScore (default "A photo depicts"; empty: none) |
| `emscore_idf` | "true" (default) or "false": IDF weights of EMScore's fine-grained precision |
| `emscore_idf_corpus` | a file of captions to take EMScore's IDF from (`clip.read_caption_corpus`: text, one a line, or JSON); default: the scored batch |
| `device`, `batch_size` | where and how many texts/frames at a time the encoders run (default cpu, 64) |
| `meteor_jar` [`LEPUS_METEOR_JAR`] | METEOR 1.5 jar (see meteor.py) |
| `frames` | frames sampled per clip by whoever builds the items (default 8; not read here) |
| `pacs_model`, `factvc_model`, `polos_model`, `dino_model`, ... | the plug-ins of `embedding_plugins.py` (PAC-S, FactVC, Polos, Redemption Score): see its docstring |
| `judge_model` [`LEPUS_JUDGE_MODEL`], `judge_*` | the VLM of the generative judges and their options (judge.py) |
| `captionqa_model` [`LEPUS_CAPTIONQA_MODEL`], `captionqa_*` | CaptionQA's LM, question file and options (captionqa.py) |

`score_metrics(metrics, items, progress=...)` scores several metrics over one item list; the
standard ones (BLEU, ROUGE-L, METEOR, CIDEr-D) share one tokenisation and one METEOR process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training_bridge.metrics.captionqa import (
    CAPTIONQA_SETTING_KEYS,
    captionqa_metric,
    captionqa_options,
)
from training_bridge.metrics.embedding_plugins import (
    EMBEDDING_METRIC_NAMES,
    EMBEDDING_SETTING_KEYS,
    build_embedding_metric,
    check_embedding_settings,
)
from training_bridge.metrics.interface import LABELS as LABELS
from training_bridge.metrics.interface import CaptionMetric as CaptionMetric
from training_bridge.metrics.interface import MetricItem as MetricItem
from training_bridge.metrics.interface import Video as Video
from training_bridge.metrics.interface import whole_setting
from training_bridge.metrics.judge import (
    JUDGE_METRIC_NAMES,
    JUDGE_SETTING_KEYS,
    judge_metric,
    judge_options,
)
from training_bridge.metrics.meteor import MeteorScorer
from training_bridge.metrics.standard import (
    METRIC_NAMES as STANDARD_METRIC_NAMES,
)
from training_bridge.metrics.standard import (
    MetricUnavailable,
    metric_unavailable_reasons,
    standard_metric_scores,
)

CLIP_METRIC_NAMES = ("clipscore", "refclipscore", "emscore", "emscore_ref")
LCLIP_METRIC_NAMES = ("lclipscore", "reflclipscore")
GENERATIVE_METRIC_NAMES = (*JUDGE_METRIC_NAMES, "captionqa")  # judge.py, captionqa.py
METRIC_NAMES = (
    *STANDARD_METRIC_NAMES,
    *CLIP_METRIC_NAMES,
    *LCLIP_METRIC_NAMES,
    *EMBEDDING_METRIC_NAMES,
    *GENERATIVE_METRIC_NAMES,
)
# What an evaluation table lists by default: the lexical metrics of `standard.DEFAULT_METRICS`
# and every learned baseline (an unavailable one as a row with its reason).
TABLE_METRICS = (
    "bleu1",
    "bleu4",
    "rougeL",
    "meteor",
    "cider",
    *CLIP_METRIC_NAMES,
    *LCLIP_METRIC_NAMES,
    *EMBEDDING_METRIC_NAMES,
    *GENERATIVE_METRIC_NAMES,
)
SETTING_KEYS = (
    "clip_model",
    "lclip_model",
    "clip_prompt",
    "emscore_idf",
    "emscore_idf_corpus",
    "device",
    "batch_size",
    "meteor_jar",
    "frames",
    *EMBEDDING_SETTING_KEYS,
    *JUDGE_SETTING_KEYS,
    *CAPTIONQA_SETTING_KEYS,
)
DEFAULT_CLIP_PROMPT = "A photo depicts"


@dataclass
class StandardMetric:
    """BLEU-n, ROUGE-L, METEOR or CIDEr-D (`standard.standard_metric_scores`) as a plug-in."""

    name: str
    meteor_jar: str | None = None
    meteor_scorer: MeteorScorer | None = None  # a running METEOR process to reuse
    label: str = ""
    needs_references: bool = True
    needs_video: bool = False

    def __post_init__(self) -> None:
        self.label = self.label or LABELS.get(self.name, self.name)

    def score(self, items: Sequence[MetricItem]) -> list[float]:
        scores = standard_metric_scores(
            [item.candidate for item in items],
            [list(item.references) for item in items],
            metrics=[self.name],
            meteor_jar=self.meteor_jar,
            meteor_scorer=self.meteor_scorer,
        )
        return [float(value) for value in scores[self.name]]


@dataclass(frozen=True)
class Settings:
    """The parsed settings of one registry call (see the module docstring)."""

    clip_model: str | None = None
    lclip_model: str | None = None
    clip_prompt: str = DEFAULT_CLIP_PROMPT
    emscore_idf: bool = True
    emscore_idf_corpus: str | None = None
    device: str = "cpu"
    batch_size: int = 64
    meteor_jar: str | None = None
    frames: int = 8


def parse_settings(settings: Mapping[str, Any] | None = None) -> Settings:
    """Typed settings from `key=value` strings, with the environment fallbacks; unknown keys and
    bad values raise ValueError."""
    raw = {key: value for key, value in (settings or {}).items() if value is not None}
    unknown = sorted(set(raw) - set(SETTING_KEYS))
    if unknown:
        raise ValueError(
            f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(SETTING_KEYS)}"
        )

    def text(key: str, env: str | None = None) -> str | None:
        value = raw.get(key)
        if value is None and env:
            value = os.environ.get(env)
        value = None if value is None else str(value).strip()
        return value or None

    def positive(key: str, default: int) -> int:
        return whole_setting(raw.get(key), default, key)

    idf = str(raw.get("emscore_idf", "true")).strip().lower()
    if idf not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"emscore_idf must be true or false, not {raw['emscore_idf']!r}")
    prompt = raw.get("clip_prompt")
    corpus = text("emscore_idf_corpus")
    if corpus is not None and not Path(corpus).expanduser().is_file():
        raise ValueError(f"emscore_idf_corpus={corpus}: no such file")
    check_embedding_settings(raw)
    return Settings(
        clip_model=text("clip_model", "LEPUS_CLIP_MODEL"),
        lclip_model=text("lclip_model", "LEPUS_LCLIP_MODEL"),
        clip_prompt=DEFAULT_CLIP_PROMPT if prompt is None else str(prompt).strip(),
        emscore_idf=idf in ("true", "1", "yes"),
        emscore_idf_corpus=None if corpus is None else str(Path(corpus).expanduser()),
        device=text("device") or "cpu",
        batch_size=positive("batch_size", 64),
        meteor_jar=text("meteor_jar"),
        frames=positive("frames", 8),
    )


def weights_unavailable_reason(model: str | None, *, setting: str) -> str | None:
    """Why the weights named by a setting cannot be loaded offline (None when they look loadable).

    A directory must hold a transformers `config.json`; anything else is taken for a model id and
    must already be in the local Hugging Face cache (nothing is downloaded)."""
    if not model:
        return f"no weights given: set {setting}=PATH or a model id in the local Hugging Face cache"
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            return f"{setting}={model}: no config.json there (a transformers checkpoint is needed)"
        return None
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        return f"{setting}={model}: no such directory"
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on huggingface_hub
        return f"{setting}={model}: not a directory, and huggingface_hub is not installed"
    cached = try_to_load_from_cache(model, "config.json")
    if not isinstance(cached, str):
        return (
            f"{setting}={model}: not a directory and not in the local Hugging Face cache "
            "(nothing is downloaded; give a local path)"
        )
    return None


def available_metrics(
    settings: Mapping[str, Any] | None = None, names: Sequence[str] | None = None
) -> tuple[dict[str, CaptionMetric], dict[str, str]]:
    """({name: metric} that can run here, {name: why it cannot}) for `names` (default
    `TABLE_METRICS`), in the order asked. Every name lands in exactly one of the two."""
    wanted = list(dict.fromkeys(names if names is not None else TABLE_METRICS))
    unknown = [name for name in wanted if name not in METRIC_NAMES]
    if unknown:
        raise ValueError(
            f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRIC_NAMES)}"
        )
    parsed = parse_settings(settings)
    available: dict[str, CaptionMetric] = {}
    unavailable: dict[str, str] = {}
    standard = [name for name in wanted if name in STANDARD_METRIC_NAMES]
    reasons = metric_unavailable_reasons(standard, meteor_jar=parsed.meteor_jar)
    encoders: dict[str, Any] = {}  # one encoder (and its caches) per checkpoint

    def encoder(model: str) -> Any:
        from training_bridge.metrics.clip import ClipEncoder

        if model not in encoders:
            encoders[model] = ClipEncoder(model, device=parsed.device, batch_size=parsed.batch_size)
        return encoders[model]

    for name in wanted:
        if name in EMBEDDING_METRIC_NAMES:
            metric, reason = build_embedding_metric(
                name,
                {**(settings or {})},
                clip_model=parsed.clip_model,
                device=parsed.device,
                batch_size=parsed.batch_size,
                emscore_idf=parsed.emscore_idf,
                emscore_idf_corpus=parsed.emscore_idf_corpus,
                encoder=encoder,
                unavailable=lambda model, setting: weights_unavailable_reason(
                    model, setting=setting
                ),
            )
            if metric is None:
                unavailable[name] = reason or "unavailable"
            else:
                available[name] = metric
            continue
        if name in STANDARD_METRIC_NAMES:
            if name in reasons:
                unavailable[name] = reasons[name]
            else:
                available[name] = StandardMetric(name, meteor_jar=parsed.meteor_jar)
            continue
        if name in GENERATIVE_METRIC_NAMES:
            try:
                available[name] = _generative_metric(name, settings or {}, parsed.device)
            except MetricUnavailable as error:
                unavailable[name] = str(error)
            continue
        setting = "lclip_model" if name in LCLIP_METRIC_NAMES else "clip_model"
        model = parsed.lclip_model if setting == "lclip_model" else parsed.clip_model
        reason = weights_unavailable_reason(model, setting=setting)
        if reason is not None:
            unavailable[name] = reason
            continue
        assert model is not None
        available[name] = _learned_metric(name, encoder(model), parsed)
    ordered_available = {name: available[name] for name in wanted if name in available}
    ordered_unavailable = {name: unavailable[name] for name in wanted if name in unavailable}
    return ordered_available, ordered_unavailable


def _generative_metric(name: str, settings: Mapping[str, Any], device: str) -> CaptionMetric:
    """A judge (`judge.py`) or CaptionQA (`captionqa.py`); MetricUnavailable with the reason when
    its weights (or questions) are missing; ValueError on a bad setting."""
    options = captionqa_options(settings) if name == "captionqa" else judge_options(settings)
    setting, env = (
        ("captionqa_model", "LEPUS_CAPTIONQA_MODEL")
        if name == "captionqa"
        else ("judge_model", "LEPUS_JUDGE_MODEL")
    )
    model = str(settings.get(setting) or os.environ.get(env) or "").strip() or None
    reason = weights_unavailable_reason(model, setting=setting)
    if reason is not None:
        raise MetricUnavailable(reason)
    assert model is not None
    if name == "captionqa":
        return captionqa_metric(model, options, device=device)
    return judge_metric(name, model, options, device=device)


def _learned_metric(name: str, encoder: Any, settings: Settings) -> CaptionMetric:
    from training_bridge.metrics.clip import ClipScore, EMScore

    if name in ("clipscore", "lclipscore"):
        return ClipScore(name, encoder, with_references=False, prompt=settings.clip_prompt)
    if name in ("refclipscore", "reflclipscore"):
        return ClipScore(name, encoder, with_references=True, prompt=settings.clip_prompt)
    return EMScore(
        name,
        encoder,
        with_references=name == "emscore_ref",
        idf=settings.emscore_idf,
        idf_corpus=settings.emscore_idf_corpus,
    )


def missing_inputs_reason(metric: CaptionMetric, items: Sequence[MetricItem]) -> str | None:
    """Why these items cannot be scored by `metric` (they lack the video or references it needs)."""
    if metric.needs_video:
        missing = sum(item.video is None for item in items)
        if missing:
            return f"needs the video, and {missing} of {len(items)} candidates have no frames"
    if metric.needs_references:
        missing = sum(not item.references for item in items)
        if missing:
            return f"needs references, and {missing} of {len(items)} candidates have none"
    return None


def score_metrics(
    metrics: Mapping[str, CaptionMetric],
    items: Sequence[MetricItem],
    *,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """({name: scores} of the metrics that ran, {name: why not} of those that could not run on these
    items), each in the order of `metrics`."""
    scores: dict[str, np.ndarray] = {}
    failed: dict[str, str] = {}
    runnable = {}
    for name, metric in metrics.items():
        reason = missing_inputs_reason(metric, items)
        if reason is None:
            runnable[name] = metric
        else:
            failed[name] = reason
    standard = [m for m in runnable.values() if isinstance(m, StandardMetric)]
    if standard:
        # One tokenisation and one METEOR process for all of them.
        try:
            computed = standard_metric_scores(
                [item.candidate for item in items],
                [list(item.references) for item in items],
                metrics=[metric.name for metric in standard],
                meteor_jar=standard[0].meteor_jar,
                meteor_scorer=next((m.meteor_scorer for m in standard if m.meteor_scorer), None),
                skip_unavailable=True,
                progress=progress,
            )
        except MetricUnavailable as error:  # pragma: no cover - skip_unavailable catches these
            computed = {}
            failed.update({metric.name: str(error) for metric in standard})
        for metric in standard:
            if metric.name in computed:
                scores[metric.name] = np.asarray(computed[metric.name], dtype=np.float64)
            else:
                failed.setdefault(metric.name, "its runtime vanished while scoring")
    for name, metric in runnable.items():
        if isinstance(metric, StandardMetric):
            continue
        if progress is not None:
            progress(name)
        try:
            scores[name] = np.asarray(metric.score(items), dtype=np.float64)
        except MetricUnavailable as error:
            failed[name] = str(error)
    order = list(metrics)
    return (
        {name: scores[name] for name in order if name in scores},
        {name: failed[name] for name in order if name in failed},
    )
